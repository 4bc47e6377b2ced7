//! The guest route kind on the workers: a connection's side (`conn`), the
//! route's pending work on one worker and its scheduler (`slot`), the turn
//! that runs that work (`turn`) inline or, once a call held the worker too
//! long (`offload`), on the route's guest thread (`thread`); the route's
//! state shared by all workers (`route`) and how its guests' commands are
//! applied (`apply`); deploys and what they inherit (`deploy`, `census`,
//! `inherit`).

pub(crate) mod apply;
pub(crate) mod census;
pub(crate) mod conn;
pub(crate) mod deploy;
pub(crate) mod inherit;
pub(crate) mod offload;
pub(crate) mod route;
pub(crate) mod slot;
pub(crate) mod thread;
pub(crate) mod turn;
