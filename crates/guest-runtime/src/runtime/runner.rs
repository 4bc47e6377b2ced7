//! Runs one route's guest on one worker thread: owns the live instance (its
//! Store), replaces it after `recycle_after` batches (`isolation = "worker"`)
//! or after every batch (`"batch"`) or after any fault, sets the deadline per
//! call, applies attachment commands and keeps each connection's record
//! (request target, route parameters, attachment), which outlives every
//! instance.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use wasmtime::{PoolConcurrencyLimitError, Store, Trap};

use crate::runtime::abi::{
    upgrade_request_v3, upgrade_response_from_v3, Accept, Batch, Commands, HttpOutcome,
    UpgradeRequest, UpgradeResponse,
};
use crate::runtime::engine::POOL_COMPONENT_INSTANCES;
use crate::runtime::error::Fault;
use crate::runtime::host::{ConnRecord, StoreState};
use crate::runtime::program::Handler;
use crate::runtime::program::{InstancePermit, Program};
use crate::services::kv::KvStore;
use crate::ConnectionId;
use weir_config::Isolation;

/// A live instance and what it has served.
struct Live {
    store: Store<StoreState>,
    handler: Handler,
    batches: u64,
    _permit: InstancePermit,
}

/// One route's guest on one worker. Not shared between threads.
pub struct Runner {
    program: Arc<Program>,
    live: Option<Live>,
    /// Per connection: its info (target, route parameters) and durable
    /// state (the upgrade's attachment, then `set-attachment`). Moved into
    /// the Store for each call so the `connection` import can read it, and
    /// back out afterwards, so it survives instance replacement.
    conns: HashMap<ConnectionId, ConnRecord>,
    /// Scratch: indices of attachment commands over the cap, to be turned
    /// into closes (kept to reuse its allocation).
    over_cap: Vec<usize>,
    /// Scratch: the connections present in the current batch.
    batch_conns: HashSet<ConnectionId>,
    /// Instances replaced because they faulted (for metrics).
    faults: u64,
    /// How long the last guest call ran (instantiation not included): the
    /// scheduler moves a route off the worker when this passes its slice.
    last_call: std::time::Duration,
    /// The last call was its instance's first (which touches fresh memory,
    /// so it may take longer without the guest being slow).
    last_call_first: bool,
    /// The route's key-value store, given to each instance's Store.
    kv: Option<Arc<KvStore>>,
}

impl Runner {
    /// A runner for `program`; the first call creates the instance.
    pub fn new(program: Arc<Program>) -> Self {
        Runner {
            program,
            live: None,
            conns: HashMap::new(),
            over_cap: Vec::new(),
            batch_conns: HashSet::new(),
            faults: 0,
            last_call: std::time::Duration::ZERO,
            last_call_first: false,
            kv: None,
        }
    }

    /// A runner whose instances read `kv` through the `kv.get` import.
    pub fn with_kv(mut self, kv: Option<Arc<KvStore>>) -> Self {
        self.kv = kv;
        self
    }

    pub fn program(&self) -> &Arc<Program> {
        &self.program
    }

    /// Faults seen so far (each one cost an instance).
    pub fn faults(&self) -> u64 {
        self.faults
    }

    /// The attachment held for `conn`, if any.
    pub fn attachment(&self, conn: ConnectionId) -> Option<&[u8]> {
        let record = self.conns.get(&conn)?;
        Some(record.attachment()).filter(|a| !a.is_empty())
    }

    /// Every attachment held (empty ones included), for a deploy's census.
    pub(crate) fn attachments(&self) -> impl Iterator<Item = &[u8]> {
        self.conns.values().map(|record| record.attachment())
    }

    /// `conn` closed: drop its record.
    pub fn forget(&mut self, conn: ConnectionId) {
        self.conns.remove(&conn);
    }

    /// Drop the live instance now (the next call starts a fresh one).
    pub fn recycle(&mut self) {
        self.live = None;
    }

    /// Serve `program` from the next call on (a deploy or rollback): the
    /// instance of the old one is dropped at this batch boundary, the
    /// attachments stay, so open connections go on where they were.
    pub(crate) fn switch(&mut self, program: Arc<Program>) {
        self.live = None;
        self.program = program;
    }

    /// Ask the guest whether to accept an upgrade. A reject status outside
    /// 400–599 becomes 403; accepting with a subprotocol the client did not
    /// offer (RFC 6455 §4.1 would make the client fail the connection) or
    /// with an attachment over `attachment_max` becomes a 500.
    pub fn upgrade(&mut self, req: &UpgradeRequest) -> Result<UpgradeResponse, Fault> {
        let result = self.call(|handler, store| match handler {
            Handler::V4(h) => h.weir_gateway_handler().call_upgrade(store, req),
            Handler::V3(h) => h
                .weir_gateway_handler()
                .call_upgrade(store, &upgrade_request_v3(req))
                .map(upgrade_response_from_v3),
        });
        let response = self.finish_call(result)?;
        Ok(self.checked_upgrade(req, response))
    }

    /// A deferred upgrade's second half: the guest decides with the
    /// outcome of its request (a second `defer` is refused with 500).
    pub(crate) fn resume_upgrade(
        &mut self,
        tag: u64,
        req: &UpgradeRequest,
        outcome: &HttpOutcome,
    ) -> Result<UpgradeResponse, Fault> {
        let result = self.call(|handler, store| match handler {
            Handler::V4(h) => h
                .weir_gateway_handler()
                .call_resume_upgrade(store, tag, req, outcome),
            // A 0.3.0 guest cannot defer, so it is never resumed.
            Handler::V3(_) => Ok(UpgradeResponse::Reject(500)),
        });
        let response = match self.finish_call(result)? {
            UpgradeResponse::Defer(_) => {
                tracing::warn!(route = %self.program.route,
                    "guest deferred an upgrade again from resume-upgrade; refusing with 500");
                UpgradeResponse::Reject(500)
            }
            other => other,
        };
        Ok(self.checked_upgrade(req, response))
    }

    /// The guest's answer, with the statuses and accepts the host does not
    /// let through replaced.
    fn checked_upgrade(&self, req: &UpgradeRequest, response: UpgradeResponse) -> UpgradeResponse {
        match response {
            UpgradeResponse::Reject(status) if !(400..=599).contains(&status) => {
                UpgradeResponse::Reject(403)
            }
            UpgradeResponse::Accept(Accept {
                protocol: Some(protocol),
                ..
            }) if !offered(req, &protocol) => {
                tracing::warn!(route = %self.program.route, protocol,
                    "guest chose a subprotocol the client did not offer; refusing with 500");
                UpgradeResponse::Reject(500)
            }
            UpgradeResponse::Accept(Accept { attachment, .. })
                if attachment.len() > self.program.cfg.attachment_max =>
            {
                tracing::warn!(route = %self.program.route, bytes = attachment.len(),
                    cap = self.program.cfg.attachment_max,
                    "guest accepted an upgrade with an attachment over attachment_max; refusing with 500");
                UpgradeResponse::Reject(500)
            }
            other => other,
        }
    }

    /// How long the last guest call ran, instantiation not included, and
    /// whether it was its instance's first.
    pub(crate) fn last_call(&self) -> (std::time::Duration, bool) {
        (self.last_call, self.last_call_first)
    }

    /// Hand one batch to the guest (one call) and return its validated
    /// commands. Attachment commands are applied here and not returned.
    /// On a fault the instance is gone and the caller closes the batch's
    /// connections with [`Fault::close_code`].
    pub fn handle(&mut self, batch: &mut Batch) -> Result<Commands, Fault> {
        if batch.is_empty() {
            return Ok(Commands::empty());
        }
        if batch.has_opens() {
            for (conn, info) in batch.opens() {
                if let Some(record) = ConnRecord::new(info) {
                    self.conns.insert(conn, record);
                }
            }
        }
        let result = self.call(|handler, store| match handler {
            Handler::V4(h) => h
                .weir_gateway_handler()
                .call_handle(store, &batch.raw)
                .map(Commands::parse),
            Handler::V3(h) => {
                // The same two byte lists under 0.3.0's type: moved, not
                // copied, and moved back after the call.
                let raw = crate::runtime::abi::bindings_v3::weir::gateway::types::Batch {
                    events: std::mem::take(&mut batch.raw.events),
                    data: std::mem::take(&mut batch.raw.data),
                };
                let answer = h.weir_gateway_handler().call_handle(&mut *store, &raw);
                batch.raw.events = raw.events;
                batch.raw.data = raw.data;
                answer.map(Commands::parse_v3)
            }
        });
        let parsed = self.finish_call(result)?;
        let mut commands = match parsed {
            Ok(commands) => commands,
            Err(fault) => return Err(self.fault(fault)),
        };
        if commands.has_attachments() {
            self.apply_attachments(batch, &mut commands);
        }
        Ok(commands)
    }

    /// Store the batch's attachments; one over the cap closes its
    /// connection instead (the others in the batch are unaffected).
    fn apply_attachments(&mut self, batch: &Batch, commands: &mut Commands) {
        self.batch_conns.clear();
        self.batch_conns.extend(batch.connections());
        self.over_cap.clear();
        let cap = self.program.cfg.attachment_max;
        for (index, conn, bytes) in commands.attachments() {
            if !self.batch_conns.contains(&conn) {
                tracing::warn!(route = %self.program.route, conn,
                    "guest set an attachment for a connection outside its batch; ignored");
                continue;
            }
            if bytes.len() > cap {
                tracing::warn!(route = %self.program.route, conn, bytes = bytes.len(), cap,
                    "guest attachment over attachment_max; closing the connection with 1011");
                self.over_cap.push(index);
                continue;
            }
            if let Some(record) = self.conns.get_mut(&conn) {
                record.set_attachment(bytes);
            }
        }
        for &index in &self.over_cap {
            commands.replace_with_close(index);
        }
    }

    /// Run `f` against a live instance with a fresh deadline and the
    /// attachments moved in.
    fn call<R>(
        &mut self,
        f: impl FnOnce(&Handler, &mut Store<StoreState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        if self.live.is_none() {
            self.live = Some(self.start()?);
        }
        let Some(live) = self.live.as_mut() else {
            unreachable!("started above")
        };
        live.store.set_epoch_deadline(self.program.deadline_ticks);
        std::mem::swap(&mut live.store.data_mut().conns, &mut self.conns);
        let started = std::time::Instant::now();
        let result = f(&live.handler, &mut live.store);
        self.last_call = started.elapsed();
        self.last_call_first = live.batches == 0;
        std::mem::swap(&mut live.store.data_mut().conns, &mut self.conns);
        live.batches += 1;
        result.map_err(|e| CallError::Guest {
            memory_refused: live.store.data().memory_refused,
            error: e,
        })
    }

    /// A new Store and instance, within the route's instance cap.
    fn start(&mut self) -> Result<Live, CallError> {
        let permit = self
            .program
            .try_acquire()
            .ok_or(CallError::Fault(Fault::Overloaded(
                self.program.max_instances(),
            )))?;
        let mut store = self.program.new_store();
        store.data_mut().kv = self.kv.clone();
        match self.program.instantiate(&mut store) {
            Ok(handler) => Ok(Live {
                store,
                handler,
                batches: 0,
                _permit: permit,
            }),
            Err(e) => {
                let fault = if store.data().memory_refused {
                    Fault::Memory(self.program.cfg.memory)
                } else if e.is::<PoolConcurrencyLimitError>() {
                    // Other routes hold the whole pool.
                    Fault::Overloaded(POOL_COMPONENT_INSTANCES as usize)
                } else {
                    Fault::Instantiate(format!("{e:#}"))
                };
                Err(CallError::Fault(fault))
            }
        }
    }

    /// Turn a call's outcome into a result, retiring the instance when it
    /// faulted or has served its batches.
    fn finish_call<R>(&mut self, result: Result<R, CallError>) -> Result<R, Fault> {
        match result {
            Ok(value) => {
                let recycle = match self.program.cfg.isolation {
                    Isolation::Batch => true,
                    Isolation::Worker => self
                        .live
                        .as_ref()
                        .is_some_and(|l| l.batches >= self.program.cfg.recycle_after),
                };
                if recycle {
                    self.live = None;
                }
                Ok(value)
            }
            Err(CallError::Fault(fault)) => Err(self.fault(fault)),
            Err(CallError::Guest {
                memory_refused,
                error,
            }) => {
                let fault = self.classify(memory_refused, &error);
                Err(self.fault(fault))
            }
        }
    }

    fn classify(&self, memory_refused: bool, error: &wasmtime::Error) -> Fault {
        if memory_refused {
            return Fault::Memory(self.program.cfg.memory);
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => Fault::Deadline(self.program.timeout()),
            Some(trap) => Fault::Trap(trap.to_string()),
            None => Fault::Trap(format!("{error:#}")),
        }
    }

    /// Drop the instance (a trap poisons its whole Store) and count; the
    /// caller logs the fault with what it cost (the batch's connections,
    /// the upgrade).
    fn fault(&mut self, fault: Fault) -> Fault {
        self.live = None;
        if !matches!(fault, Fault::Overloaded(_)) {
            self.faults += 1;
        }
        fault
    }
}

/// Whether the client offered `protocol` in `sec-websocket-protocol`.
fn offered(req: &UpgradeRequest, protocol: &str) -> bool {
    req.headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("sec-websocket-protocol"))
        .flat_map(|(_, value)| value.split(','))
        .any(|p| p.trim() == protocol)
}

/// A call that failed, before classification.
enum CallError {
    /// Failed before reaching the guest (no slot, instantiation).
    Fault(Fault),
    /// The guest call returned an error (trap, deadline, memory).
    Guest {
        memory_refused: bool,
        error: wasmtime::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subprotocol_must_be_one_the_client_offered() {
        let req = UpgradeRequest {
            path: "/".into(),
            query: String::new(),
            headers: vec![
                ("Sec-WebSocket-Protocol".into(), "chat, superchat".into()),
                ("sec-websocket-protocol".into(), "v2".into()),
            ],
            remote_addr: "127.0.0.1:1".into(),
            params: Vec::new(),
        };
        assert!(offered(&req, "chat"));
        assert!(offered(&req, "superchat"));
        assert!(offered(&req, "v2"));
        assert!(!offered(&req, "super"));
        assert!(!offered(&req, ""));
    }
}
