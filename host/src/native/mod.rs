//! Declared behaviours that reply without a guest: echo and relay.

pub mod echo;
pub mod relay;
