//! The `weir` command line: parses arguments, sets up logging and signal
//! handling, and calls the library. Nothing testable lives here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio::sync::watch;
use weir::config::{self, Config};

/// weir — a WebSocket edge gateway: native echo/relay routes and sandboxed
/// WebAssembly guest routes, wired in a TOML routes file.
#[derive(Parser)]
#[command(name = "weir", version, propagate_version = true)]
#[command(
    after_help = "Logging: set RUST_LOG (default \"info\"), e.g. RUST_LOG=weir=debug.\n\
Admin commands read the admin token from WEIR_ADMIN_TOKEN and the admin address\n\
from --admin, else WEIR_ADMIN, else [admin] listen in ./routes.toml."
)]
struct Cli {
    /// Log lines as text, or as one JSON object per line (fields: level,
    /// target, message, route, conn, ...)
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway until Ctrl-C or SIGTERM.
    Serve {
        /// Routes file (TOML) [default: none: the built-in native /echo and
        /// /relay routes]
        file: Option<PathBuf>,
        /// Address to listen on, e.g. 0.0.0.0:9001; overrides [server] listen
        /// [default: the file's listen, else 127.0.0.1:9001]
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// Worker threads, 0 = one per core; overrides [server] workers
        /// [default: the file's workers, else one per core]
        #[arg(long, value_name = "N")]
        workers: Option<usize>,
    },
    /// Validate a routes file and compile its guest components: prints
    /// "ok: N routes" or the error with its line, and exits non-zero on error.
    Check {
        /// Routes file (TOML) to validate
        file: PathBuf,
    },
    /// Start a guest handler project NAME: the SDK matching this gateway, a
    /// starter handler (Rust: with tests), and a routes file mounting it at
    /// /NAME. Rust needs only a Rust toolchain to build; js needs Node.js,
    /// python needs Python 3 (each SDK's build tool is installed into the
    /// project on the first `weir build`).
    New {
        /// Project (and crate, and route) name: lower-case letters, digits,
        /// '-' and '_'
        name: String,
        /// Directory to create the project in
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
        /// The handler's language
        #[arg(long, default_value = "rust", value_parser = ["rust", "js", "python"])]
        lang: String,
    },
    /// Build a guest project (made by `weir new`) for wasm32-wasip2 and
    /// print the component's path (DIR/dist/NAME.wasm).
    Build {
        /// The project's directory
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Deploy a component to a guest route of a running gateway: it is
    /// compiled and tried first; open connections switch at their next
    /// message batch.
    Deploy {
        /// The gateway's admin address ([admin] listen), e.g. 127.0.0.1:9090
        /// or http://127.0.0.1:9090 [default: $WEIR_ADMIN, else [admin]
        /// listen of ./routes.toml]
        #[arg(long, value_name = "ADDR")]
        admin: Option<String>,
        /// The route's path as in the routes file, e.g. /json
        route: String,
        /// The component (.wasm)
        file: PathBuf,
        /// Deploy even if the new version cannot read some live
        /// connections' state: those start from their state's Default
        /// (without it, such a deploy is refused with their count)
        #[arg(long)]
        reset_state: bool,
    },
    /// Put a guest route's previous version back, pinned: reloads (SIGHUP)
    /// keep it until the next deploy or `weir unpin`. Refused, like a
    /// deploy, if it cannot read the live connections' state.
    Rollback {
        /// The gateway's admin address (as for deploy)
        #[arg(long, value_name = "ADDR")]
        admin: Option<String>,
        route: String,
        /// Roll back even if the previous version cannot read some live
        /// connections' state (they start from Default)
        #[arg(long)]
        reset_state: bool,
    },
    /// Let reloads deploy a rolled-back route's component from the routes
    /// file again.
    Unpin {
        /// The gateway's admin address (as for deploy)
        #[arg(long, value_name = "ADDR")]
        admin: Option<String>,
        route: String,
    },
    /// List a running gateway's routes, versions and connections.
    Routes {
        /// The gateway's admin address (as for deploy)
        #[arg(long, value_name = "ADDR")]
        admin: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs go to stderr, so stdout stays for command output (`weir check`).
    let _log = weir::logging::init(matches!(cli.log_format, LogFormat::Json));
    let result = match cli.command {
        Command::Serve {
            file,
            listen,
            workers,
        } => serve(file, listen, workers),
        Command::Check { file } => check(file),
        Command::New { name, dir, lang } => new_project(&dir, &name, &lang),
        Command::Build { dir } => weir::scaffold::build_project(&dir).map(|path| {
            println!("{}", path.display());
        }),
        Command::Deploy {
            admin,
            route,
            file,
            reset_state,
        } => admin_addr(admin).and_then(|admin| deploy(&admin, &route, &file, reset_state)),
        Command::Rollback {
            admin,
            route,
            reset_state,
        } => admin_addr(admin).and_then(|admin| rollback(&admin, &route, reset_state)),
        Command::Unpin { admin, route } => {
            admin_addr(admin).and_then(|admin| unpin(&admin, &route))
        }
        Command::Routes { admin } => admin_addr(admin).and_then(|admin| routes(&admin)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(
    file: Option<PathBuf>,
    listen: Option<SocketAddr>,
    workers: Option<usize>,
) -> anyhow::Result<()> {
    let mut config = match &file {
        Some(path) => Config::load(path)?,
        None => Config::builtin_default(),
    };
    config.check_tls()?;
    if let Some(listen) = listen {
        config.server.listen = listen;
    }
    if let Some(workers) = workers {
        config.server.workers = match workers {
            0 => config::default_workers(),
            n => n,
        };
    }
    let routes = config.routes.len();
    // Before the listeners exist: a SIGHUP sent as soon as the port answers
    // must reload, not kill the process (SIGHUP's default action).
    let signals = Signals::install()?;
    // Binding loads and compiles every guest first: "serving" is said once
    // all of them are ready.
    let server = weir::server::Server::bind(config).context("the gateway cannot start")?;
    let addr = server.local_addr();
    match &file {
        None => tracing::info!(
            "no routes file given: serving the built-in default, native /echo and /relay on {addr}"
        ),
        Some(path) => tracing::info!(
            "serving {}: {routes} route{} on {addr}",
            path.display(),
            if routes == 1 { "" } else { "s" }
        ),
    }
    let shutdown = signals.run(server.changes())?;
    server
        .run(shutdown)
        .context("the gateway stopped with an error")?;
    tracing::info!("stopped");
    Ok(())
}

fn check(file: PathBuf) -> anyhow::Result<()> {
    let config = Config::load(&file)?;
    config.check_tls()?;
    // Compiles every guest component and checks its world and limits, so a
    // bad .wasm is found here rather than at the first connection.
    weir::guest::check_routes(&config).with_context(|| file.display().to_string())?;
    if let Some(admin) = &config.admin {
        let token = std::env::var(&admin.token_env).unwrap_or_default();
        if token.len() < weir::server::MIN_TOKEN_BYTES {
            eprintln!(
                "note: [admin] reads its token from {}, which is not set here (or shorter than {} bytes); `weir serve` will refuse to start without it",
                admin.token_env,
                weir::server::MIN_TOKEN_BYTES
            );
        }
    }
    let n = config.routes.len();
    println!("ok: {n} route{}", if n == 1 { "" } else { "s" });
    Ok(())
}

fn new_project(parent: &std::path::Path, name: &str, lang: &str) -> anyhow::Result<()> {
    let lang = weir::scaffold::Lang::parse(lang)?;
    let dir = weir::scaffold::new_project_in(parent, name, lang)?;
    let shown = dir.display();
    println!("created {shown}: a guest handler served at /{name}");
    println!("next:");
    println!("  cd {shown}");
    if lang == weir::scaffold::Lang::Rust {
        println!("  cargo test                       # its tests, natively");
    }
    println!("  weir build                       # dist/{name}.wasm");
    println!(
        "  weir serve routes.toml           # ws://{}/{name}",
        weir::scaffold::SCAFFOLD_LISTEN
    );
    Ok(())
}

/// The admin API's address for deploy, rollback and routes: `--admin`,
/// else `WEIR_ADMIN`, else `[admin] listen` of `routes.toml` in the current
/// directory (a project from `weir new`, or a gateway's own directory).
fn admin_addr(flag: Option<String>) -> anyhow::Result<String> {
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

/// `endpoint`, asking to reset state when `reset_state`.
fn with_reset(endpoint: String, reset_state: bool) -> String {
    if reset_state {
        format!("{endpoint}?reset_state=true")
    } else {
        endpoint
    }
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

fn deploy(
    admin: &str,
    route: &str,
    file: &std::path::Path,
    reset_state: bool,
) -> anyhow::Result<()> {
    let wasm = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let path = with_reset(
        weir::client::route_endpoint(route, "component"),
        reset_state,
    );
    let answer = admin_request(admin, http::Method::PUT, &path, wasm)
        .with_context(|| format!("{} was not deployed to {route}", file.display()))?;
    println!(
        "deployed {} to {route}: version {} (sha256 {}); {}",
        file.display(),
        answer["version"],
        answer["hash"].as_str().unwrap_or("?"),
        state_line(&answer)
    );
    Ok(())
}

fn rollback(admin: &str, route: &str, reset_state: bool) -> anyhow::Result<()> {
    let path = with_reset(weir::client::route_endpoint(route, "rollback"), reset_state);
    let answer = admin_request(admin, http::Method::POST, &path, Vec::new())
        .with_context(|| format!("{route} was not rolled back"))?;
    println!(
        "rolled back {route}: version {} serves (sha256 {}); {}",
        answer["version"],
        answer["hash"].as_str().unwrap_or("?"),
        state_line(&answer)
    );
    println!("pinned: reloads keep this version until the next deploy or `weir unpin {route}`");
    Ok(())
}

fn unpin(admin: &str, route: &str) -> anyhow::Result<()> {
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

fn routes(admin: &str) -> anyhow::Result<()> {
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

/// A deploy's time (Unix seconds) as an HTTP date, in UTC.
fn deployed_at(unix_secs: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_secs);
    httpdate::fmt_http_date(at)
}

/// The signal-handling runtime, with SIGHUP already registered.
struct Signals {
    runtime: tokio::runtime::Runtime,
    hup: Option<tokio::signal::unix::Signal>,
    /// SIGTERM and SIGINT, registered with SIGHUP before the listeners
    /// exist: a signal that arrives as soon as the port answers is seen,
    /// not lost (nor the process killed by the default action).
    stop: StopSignals,
}

struct StopSignals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Registers SIGHUP, SIGTERM and SIGINT now; [`Signals::run`] waits.
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .context("starting the signal-handling runtime")?;
        let _in_runtime = runtime.enter();
        let hup = signal(SignalKind::hangup())
            .inspect_err(|err| {
                tracing::warn!(
                    "cannot listen for SIGHUP ({err}); reload with POST /reload on the admin API"
                )
            })
            .ok();
        let term = signal(SignalKind::terminate())
            .inspect_err(|err| tracing::warn!("cannot listen for SIGTERM ({err})"))
            .ok();
        let int = signal(SignalKind::interrupt())
            .inspect_err(|err| tracing::warn!("cannot listen for SIGINT ({err})"))
            .ok();
        drop(_in_runtime);
        Ok(Signals {
            runtime,
            hup,
            stop: StopSignals { term, int },
        })
    }

    /// A watch channel that flips to true on the first Ctrl-C or SIGTERM; a
    /// second one exits at once, for when draining connections takes too
    /// long. SIGHUP reloads the routes file (`changes`).
    fn run(self, changes: weir::server::Changes) -> anyhow::Result<weir::Shutdown> {
        let (tx, rx) = watch::channel(false);
        let Signals {
            runtime,
            hup,
            mut stop,
        } = self;
        std::thread::Builder::new()
            .name("weir-signals".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let signal = tokio::select! {
                        signal = stop.next() => signal,
                        _ = reload_on_sighup(hup, changes) => "SIGHUP handler",
                    };
                    tracing::info!("{signal}: shutting down (send it again to exit at once)");
                    let _ = tx.send(true);
                    let signal = stop.next().await;
                    tracing::warn!("{signal} again: exiting without draining");
                    std::process::exit(130);
                })
            })
            .context("starting the signal-handling thread")?;
        Ok(rx)
    }
}

/// Reloads the routes file on every SIGHUP (never returns). The outcome is
/// logged by the reload itself.
async fn reload_on_sighup(
    hup: Option<tokio::signal::unix::Signal>,
    changes: weir::server::Changes,
) {
    let Some(mut hup) = hup else {
        return std::future::pending().await;
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading the routes file");
        let changes = changes.clone();
        let _ = tokio::task::spawn_blocking(move || changes.reload()).await;
    }
    std::future::pending().await
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM and says which one came.
impl StopSignals {
    /// The next SIGTERM or SIGINT (Ctrl-C); never, if neither could be
    /// registered.
    async fn next(&mut self) -> &'static str {
        async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = recv(&mut self.int) => "Ctrl-C",
            _ = recv(&mut self.term) => "SIGTERM",
        }
    }
}
