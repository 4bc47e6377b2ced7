//! Declared behaviours that reply without a guest: echo and relay.
