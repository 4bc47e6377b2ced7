//! The `weir` binary's own modules (never the library's): the admin
//! commands and the serving process's signal handling.

pub mod admin;
pub mod signals;
