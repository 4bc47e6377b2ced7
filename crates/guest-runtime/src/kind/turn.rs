//! One turn of a guest route's pending work on one worker, the same
//! whichever thread runs it (the worker inline, or the route's guest
//! thread with a job): upgrade hooks, then batches in order, then forget
//! the connections that closed, and give a removed route's instance back.
//! Only the worker stops a turn early (its slice check, passed in as
//! `stop`); what is left goes to the guest thread.

use crate::kind::route::GuestRoute;
use crate::{Batch, Fault, Runner, UpgradeRequest, UpgradeResponse};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::oneshot;

/// An upgrade request waiting for the guest's hook, and where the answer goes.
pub(crate) type PendingUpgrade = (UpgradeCall, oneshot::Sender<Result<UpgradeResponse, Fault>>);

/// A call of the upgrade hooks.
pub(crate) enum UpgradeCall {
    /// `upgrade`, before the 101.
    Hook(UpgradeRequest),
    /// `resume-upgrade`: a deferred upgrade's request has its outcome.
    Resume {
        tag: u64,
        req: UpgradeRequest,
        outcome: crate::runtime::abi::HttpOutcome,
    },
}

impl UpgradeCall {
    /// Run this call on `runner`.
    fn run(&self, runner: &mut Runner) -> Result<UpgradeResponse, Fault> {
        match self {
            UpgradeCall::Hook(req) => runner.upgrade(req),
            UpgradeCall::Resume { tag, req, outcome } => runner.resume_upgrade(*tag, req, outcome),
        }
    }
}

/// A route's pending work on one worker, in the order a turn runs it.
#[derive(Default)]
pub(crate) struct Work {
    /// Upgrade requests waiting for the guest's `upgrade` hook, oldest first.
    pub upgrades: VecDeque<PendingUpgrade>,
    /// Batches, oldest first (a new one starts when the newest is full).
    pub batches: VecDeque<Batch>,
    /// Connections whose close event is in `batches`: forgotten by the
    /// runner once those have run.
    pub closed: Vec<u64>,
}

impl Work {
    /// Whether a turn would call the guest (an upgrade hook or a batch).
    pub(crate) fn has_calls(&self) -> bool {
        !self.upgrades.is_empty() || self.batches.iter().any(|b| !b.is_empty())
    }

    /// Appends `later` (work queued after this).
    pub fn append(&mut self, mut later: Work) {
        self.upgrades.append(&mut later.upgrades);
        self.batches.append(&mut later.batches);
        self.closed.append(&mut later.closed);
    }
}

/// How a turn ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// All of the work ran.
    Done,
    /// `stop` said so after a call; the rest is still in the work.
    Stopped,
}

/// Runs `work` on `runner` for `route` on worker `worker`: upgrade hooks,
/// then batches in order (a deploy takes effect before each call), then
/// forgets the closed connections and, when a reload removed the route,
/// recycles the instance (its memory and pool slot go back once its
/// connections' last events have run). Emptied batches go to `spare`.
/// After each call, `stop` gets the call's duration and whether it was the
/// instance's first; when it answers true, the turn ends there.
pub(crate) fn run_turn(
    route: &GuestRoute,
    runner: &mut Runner,
    worker: usize,
    work: &mut Work,
    spare: &mut Vec<Batch>,
    mut stop: impl FnMut((Duration, bool)) -> bool,
) -> Turn {
    while let Some((call, reply)) = work.upgrades.pop_front() {
        route.versions.refresh(runner);
        let answer = call.run(runner);
        let _ = reply.send(answer);
        if stop(runner.last_call()) {
            return Turn::Stopped;
        }
    }
    while let Some(mut batch) = work.batches.pop_front() {
        let called = !batch.is_empty();
        if called {
            route.run_batch(runner, &mut batch, worker);
        }
        batch.clear();
        spare.push(batch);
        if called && stop(runner.last_call()) {
            return Turn::Stopped;
        }
    }
    for conn in work.closed.drain(..) {
        runner.forget(conn);
    }
    if route.is_retired() {
        runner.recycle();
    }
    Turn::Done
}
