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
#[command(after_help = "Logging: set RUST_LOG (default \"info\"), e.g. RUST_LOG=weir=debug.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
        /// Directory to create the project in [default: the current one]
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs go to stderr, so stdout stays for command output (`weir check`).
    let _log = weir::logging::init();
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
    // Binding loads and compiles every guest first: "serving" is said once
    // all of them are ready.
    let server = weir::server::Server::bind(config).context("cannot start the gateway")?;
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
    let shutdown = shutdown_on_signals()?;
    server
        .run(shutdown)
        .context("the gateway stopped with an error")?;
    tracing::info!("stopped");
    Ok(())
}

fn check(file: PathBuf) -> anyhow::Result<()> {
    let config = Config::load(&file)?;
    // Compiles every guest component and checks its world and limits, so a
    // bad .wasm is found here rather than at the first connection.
    weir::guest::check_routes(&config).with_context(|| file.display().to_string())?;
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
        println!("  cargo test --target host-tuple   # its tests, natively");
    }
    println!("  weir build                       # dist/{name}.wasm");
    println!("  weir serve routes.toml           # ws://127.0.0.1:9001/{name}");
    Ok(())
}

/// A watch channel that flips to true on the first Ctrl-C or SIGTERM; a
/// second one exits at once, for when draining connections takes too long.
fn shutdown_on_signals() -> anyhow::Result<weir::Shutdown> {
    let (tx, rx) = watch::channel(false);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("starting the signal-handling runtime")?;
    std::thread::Builder::new()
        .name("weir-signals".into())
        .spawn(move || {
            runtime.block_on(async move {
                let signal = wait_for_signal().await;
                tracing::info!("{signal}: shutting down (send it again to exit at once)");
                let _ = tx.send(true);
                let signal = wait_for_signal().await;
                tracing::warn!("{signal} again: exiting without draining");
                std::process::exit(130);
            })
        })
        .context("starting the signal-handling thread")?;
    Ok(rx)
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM and says which one came.
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(err) => {
            tracing::warn!("cannot listen for SIGTERM ({err}); only Ctrl-C stops the gateway");
            let _ = tokio::signal::ctrl_c().await;
            return "Ctrl-C";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "Ctrl-C",
        _ = term.recv() => "SIGTERM",
    }
}
