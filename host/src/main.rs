//! The `weir` command line: parses arguments, sets up logging and signal
//! handling, and calls the library. Nothing testable lives here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use weir::config::{self, Config};

mod cli;
use cli::admin::{admin_addr, deploy, fleet_routes, rollback, routes, unpin, Ask};
use cli::signals::Signals;

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
        /// The loop connections run on: tasks (one tokio task each), or
        /// each worker's plane on epoll, on io_uring (uring), or on
        /// io_uring where the kernel allows it (auto); overrides [server] io
        /// [default: the file's io, else tasks]
        #[arg(long, value_name = "LOOP", value_parser = ["tasks", "epoll", "uring", "auto"])]
        io: Option<String>,
    },
    /// Validate a routes file and compile its guest components (pulling
    /// oci:// ones into the OCI cache): prints "ok: N routes" or the error
    /// with its line, and exits non-zero on error.
    Check {
        /// Routes file (TOML) to validate
        file: PathBuf,
        /// Check oci:// references' syntax only: no registry is asked and
        /// their components are not compiled
        #[arg(long)]
        no_pull: bool,
    },
    /// Publish a built component to an OCI registry as a wasm artifact
    /// (config application/vnd.wasm.config.v0+json, one application/wasm
    /// layer) and print its digest, to pin as
    /// guest = "oci://host/repo@sha256:…". Credentials come from
    /// WEIR_OCI_USERNAME / WEIR_OCI_PASSWORD; plain http only for loopback
    /// registries and those listed in WEIR_OCI_INSECURE.
    Push {
        /// The component (.wasm), e.g. from `weir build`
        file: PathBuf,
        /// Where to publish it: oci://host[:port]/repo:tag
        reference: String,
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
        /// The component (.wasm), or an oci://host/repo:tag (or
        /// @sha256:…) reference the gateway pulls itself
        file: PathBuf,
        #[command(flatten)]
        ask: Ask,
    },
    /// Put a guest route's previous version back, pinned: reloads (SIGHUP)
    /// keep it until the next deploy or `weir unpin`. Refused, like a
    /// deploy, if it cannot read the live connections' state.
    Rollback {
        /// The gateway's admin address (as for deploy)
        #[arg(long, value_name = "ADDR")]
        admin: Option<String>,
        route: String,
        #[command(flatten)]
        ask: Ask,
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
        /// The fleet's view instead: each route's desired version, what
        /// every node serves, and whether they agree
        #[arg(long)]
        cluster: bool,
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
            io,
        } => serve(file, listen, workers, io.as_deref()),
        Command::Check { file, no_pull } => check(file, no_pull),
        Command::Push { file, reference } => push(&file, &reference),
        Command::New { name, dir, lang } => new_project(&dir, &name, &lang),
        Command::Build { dir } => weir::scaffold::build_project(&dir).map(|path| {
            println!("{}", path.display());
        }),
        Command::Deploy {
            admin,
            route,
            file,
            ask,
        } => admin_addr(admin).and_then(|admin| deploy(&admin, &route, &file, ask)),
        Command::Rollback { admin, route, ask } => {
            admin_addr(admin).and_then(|admin| rollback(&admin, &route, ask))
        }
        Command::Unpin { admin, route } => {
            admin_addr(admin).and_then(|admin| unpin(&admin, &route))
        }
        Command::Routes { admin, cluster } => admin_addr(admin).and_then(|admin| {
            if cluster {
                fleet_routes(&admin)
            } else {
                routes(&admin)
            }
        }),
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
    io: Option<&str>,
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
    match io {
        Some("epoll") => config.server.io = config::Io::Epoll,
        Some("uring") => config.server.io = config::Io::Uring,
        Some("auto") => config.server.io = config::Io::Auto,
        Some(_) => config.server.io = config::Io::Tasks,
        None => {}
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

fn check(file: PathBuf, no_pull: bool) -> anyhow::Result<()> {
    let mut config = Config::load(&file)?;
    config.check_tls()?;
    let n = config.routes.len();
    if no_pull {
        // Their syntax was checked by the load; leave them out of the compile.
        let before = config.routes.len();
        config
            .routes
            .retain(|r| !matches!(&r.behaviour, config::Behaviour::Guest(g) if g.oci.is_some()));
        if before > config.routes.len() {
            eprintln!(
                "note: {} oci:// guest{} not pulled (--no-pull): syntax checked only",
                before - config.routes.len(),
                if before - config.routes.len() == 1 {
                    ""
                } else {
                    "s"
                }
            );
        }
    } else {
        weir::oci::resolve_guests(&mut config).with_context(|| file.display().to_string())?;
    }
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
    println!("ok: {n} route{}", if n == 1 { "" } else { "s" });
    Ok(())
}

fn push(file: &std::path::Path, reference: &str) -> anyhow::Result<()> {
    let reference = config::OciRef::parse(reference).map_err(anyhow::Error::msg)?;
    let digest = weir::oci::push(file, &reference)
        .with_context(|| format!("{} was not pushed", file.display()))?;
    println!("pushed {} to {reference}: {digest}", file.display());
    // The line to paste into a routes file (guest = "…"): pinned.
    let pinned = config::OciRef {
        tag: None,
        ..reference.pinned(&digest)
    };
    println!("{pinned}");
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
    if lang == weir::scaffold::Lang::Js {
        println!("  node --test                      # its tests, natively (weir build installed the SDK)");
    }
    println!(
        "  weir serve routes.toml           # ws://{}/{name}",
        weir::scaffold::SCAFFOLD_LISTEN
    );
    Ok(())
}
