//! The guest route kind on the workers: a connection's side (`conn`), the
//! route's pending work on one worker and its scheduler (`slot`), the turn
//! that runs that work (`turn`), inline or on the route's guest thread
//! (`thread`), the route's state shared by all workers (`route`) and how a
//! guest's commands are applied (`apply`), deploys and what they inherit
//! (`deploy`, `census`, `inherit`).

pub(crate) mod census;
pub(crate) mod conn;
pub(crate) mod deploy;
pub(crate) mod inherit;
pub(crate) mod route;
pub(crate) mod slot;
pub(crate) mod thread;
pub(crate) mod turn;
