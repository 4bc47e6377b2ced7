//! The hand-over from the server to the connection loop: a [`Start`] is a
//! route kind's [`Behaviour`] boxed for the server, which holds it without
//! knowing its kind, until the upgrade completes and it spawns the loop
//! (`conn::run`) over the transport the server took back. Apart from
//! `behaviour` so that the trait a kind implements does not import the loop
//! that runs it (`conn` → `behaviour`, `start` → both). On a worker with a
//! plane (`reactor::plane`), a plain TCP connection whose kind has no work
//! beside its socket becomes a slot of the plane instead of a task.

use super::behaviour::Behaviour;
use super::conn::{run, ConnEnv};
use super::transport::{H2Stream, Io, Tcp, Tls};
use std::sync::Arc;
use tracing::Instrument;

/// A connection's behaviour, ready to run once the upgrade completes; the
/// server holds it without knowing its kind.
pub trait Start {
    /// Spawns the connection loop on `io` as a task of its own on the
    /// worker (`prefix`: bytes hyper read past the request head). The task
    /// is exactly the loop's future, one allocation: an open connection's
    /// memory. Its log lines carry `span`.
    fn spawn(self: Box<Self>, io: Io, prefix: bytes::Bytes, env: ConnEnv, span: tracing::Span);
    /// The upgrade failed.
    fn abandon(self: Box<Self>, env: ConnEnv);
}

impl<B: Behaviour> Start for B {
    fn spawn(self: Box<Self>, io: Io, prefix: bytes::Bytes, mut env: ConnEnv, span: tracing::Span) {
        let behaviour = *self;
        let plane = env.plane.take().filter(|_| !B::HAS_BESIDE);
        match io {
            Io::Tcp(tcp) if plane.is_some() => {
                let plane = plane.expect("checked");
                let _entered = span.enter();
                plane.adopt(tcp, prefix, env, behaviour);
            }
            Io::Tcp(tcp) => {
                let conn = run(Tcp(Arc::new(tcp)), prefix, env, behaviour);
                tokio::task::spawn_local(conn.instrument(span));
            }
            Io::Tls(tcp, session) => {
                let conn = run(Tls::new(tcp, session), prefix, env, behaviour);
                tokio::task::spawn_local(conn.instrument(span));
            }
            Io::H2(stream) => {
                let conn = run(H2Stream(stream), prefix, env, behaviour);
                tokio::task::spawn_local(conn.instrument(span));
            }
        }
    }

    fn abandon(self: Box<Self>, env: ConnEnv) {
        (*self).abandon(env.id);
        env.outbound.consumer_gone();
    }
}
