//! What can go wrong: [`GuestError`] when loading a route's component (the
//! operator's problem, reported by `weir check` and at startup), [`Fault`]
//! when a running guest misbehaves (the guest's problem: its batch's
//! connections are closed, the gateway keeps serving).

use std::path::PathBuf;

/// A guest route that cannot be served, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// The wasmtime engine could not be configured (host problem).
    #[error("cannot start the WebAssembly engine: {0}")]
    Engine(String),
    /// The component cache directory is not the gateway user's alone.
    #[error(transparent)]
    Cache(#[from] crate::runtime::cache::CacheError),
    /// The `.wasm` file could not be read.
    #[error("route {route}: cannot read guest {}: {source} (build it with `weir build DIR`, or this repository's examples with scripts/build-guests.sh, or fix `guest = ...`)", path.display())]
    Unreadable {
        route: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not WebAssembly at all.
    #[error("route {route}: {} is not a WebAssembly file (it does not start with \\0asm)", path.display())]
    NotWasm { route: String, path: PathBuf },
    /// A core module where a component was expected.
    #[error("route {route}: {} is a core WebAssembly module, not a component; build the guest for wasm32-wasip2 with weir-guest (or wrap it with `wasm-tools component new`)", path.display())]
    CoreModule { route: String, path: PathBuf },
    /// wasmtime refused to compile the component.
    #[error("route {route}: cannot compile {}: {detail}", path.display())]
    Compile {
        route: String,
        path: PathBuf,
        detail: String,
    },
    /// The component does not implement the `weir:gateway` world this
    /// gateway speaks (missing or mismatched export, unknown import).
    /// `rebuild` says how, for the toolchain that made it.
    #[error("route {route}: {} does not fit this gateway's guest ABI ({}/handler, see wit/weir.wit; rebuild it with this gateway's SDK: {rebuild}): {detail}", path.display(), package)]
    Abi {
        route: String,
        path: PathBuf,
        /// The `weir:gateway` version this gateway speaks (`abi::WIT_PACKAGE`).
        package: &'static str,
        rebuild: &'static str,
        detail: String,
    },
    /// The route's limits cannot be honoured.
    #[error("route {route}: {detail}")]
    Limits { route: String, detail: String },
    /// The version would not read the state of some live connections
    /// (`kind::inherit`): a deploy or rollback is refused unless the
    /// operator resets state.
    #[error("route {route}: version {version} cannot read the state of {unreadable} of {live} live connections, which would lose it (first error: {first}); deploy a version whose state type reads it (add fields, or migrate: see guest-sdk/README.md), or pass --reset-state (admin API: ?reset_state=true) to start them from their state's Default")]
    StateWouldBeLost {
        route: String,
        version: u64,
        unreadable: usize,
        live: usize,
        first: String,
    },
    /// The live connections' state could not be checked (a worker did not
    /// answer, or the component's `check-state` failed).
    #[error("route {route}: cannot check the state of live connections: {detail} (pass --reset-state to deploy regardless)")]
    StateUnchecked { route: String, detail: String },
    /// One of the above, with the line of the route in the routes file.
    #[error("line {line}: {error}")]
    AtLine { line: usize, error: Box<GuestError> },
    /// Several routes failed (from [`check_routes`](crate::check_routes)).
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Many(Vec<GuestError>),
}

impl GuestError {
    /// This error, said to be about the route on `line` of the routes file
    /// (0: a route not from a file, nothing to add).
    pub fn at_line(self, line: usize) -> GuestError {
        match line {
            0 => self,
            line => GuestError::AtLine {
                line,
                error: Box::new(self),
            },
        }
    }
}

/// Why one guest call failed. The runner has already dropped the instance
/// (a trap poisons the whole wasmtime Store); the next call starts a fresh one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// The guest trapped: a panic, `unreachable`, an out-of-bounds access.
    #[error("guest trapped: {0}")]
    Trap(String),
    /// The call ran past the route's `timeout`.
    #[error("guest ran past its deadline of {0:?}")]
    Deadline(std::time::Duration),
    /// The guest tried to grow its memory past the route's `memory` limit.
    #[error("guest exceeded its memory limit of {0} bytes")]
    Memory(usize),
    /// The answer was bigger than the gateway accepts from one call.
    #[error("guest output of {bytes} bytes is over the cap of {cap} bytes")]
    OutputTooLarge { bytes: usize, cap: usize },
    /// The answer broke the ABI (the rules are weir-abi's: range out of
    /// bounds, topic or text not UTF-8, ...).
    #[error("guest output is invalid: {0}")]
    InvalidOutput(#[from] weir_abi::AbiError),
    /// A fresh instance could not be created.
    #[error("guest instance could not start: {0}")]
    Instantiate(String),
    /// The route is at its `instances` limit across workers.
    #[error("route is at its limit of {0} live instances")]
    Overloaded(usize),
}

impl Fault {
    /// The close code for the connections of the batch that faulted:
    /// 1013 (try again later) when the route is only at capacity, 1011
    /// (internal error) for everything the guest did wrong.
    pub fn close_code(&self) -> u16 {
        match self {
            Fault::Overloaded(_) => weir_ws::close::TRY_AGAIN_LATER,
            _ => weir_ws::close::INTERNAL_ERROR,
        }
    }
}

impl Fault {
    /// This fault's index in `/metrics`' causes
    /// ([`FAULT_CAUSES`](weir_reactor::stats::FAULT_CAUSES)).
    pub(crate) fn cause(&self) -> usize {
        match self {
            Fault::Trap(_) => 0,
            Fault::Deadline(_) => 1,
            Fault::Memory(_) => 2,
            Fault::OutputTooLarge { .. } | Fault::InvalidOutput(_) => 3,
            Fault::Instantiate(_) => 4,
            Fault::Overloaded(_) => 5,
        }
    }
}
