//! The proxy route kind: its upstream settings shared by workers, and on
//! each worker the upgrade that opens the upstream connection before the
//! client gets its answer (with a filter, the filter's slot there).

use super::*;

/// `native = "proxy"`: the route's upstream, shared by all workers.
pub struct ProxyRoute {
    config: Arc<ProxyConfig>,
    /// A `wss://` upstream's TLS settings.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The route's filter and its connections' links, if it has one.
    filter: Option<(Arc<dyn AttachedGuest>, Arc<FilterLinks>)>,
}

impl ProxyRoute {
    /// The route for `config`; a `wss://` route's `upstream_ca` is read
    /// here (Err: why it is unusable).
    pub fn new(config: Arc<ProxyConfig>) -> Result<ProxyRoute, crate::KindError> {
        let tls = match config.tls {
            true => Some(weir_config::tls::client_config(
                config.upstream_ca.as_deref(),
            )?),
            false => None,
        };
        Ok(ProxyRoute {
            config,
            tls,
            filter: None,
        })
    }

    /// The route with filter `guest` (its `GuestRoute` made with `links`).
    pub fn with_filter(
        mut self,
        guest: Arc<dyn AttachedGuest>,
        links: Arc<FilterLinks>,
    ) -> ProxyRoute {
        self.filter = Some((guest, links));
        self
    }
}

impl RouteKind for ProxyRoute {
    fn on_worker(&self, worker: &WorkerSetup) -> Rc<dyn WorkerRoute> {
        Rc::new(WorkerProxy {
            config: self.config.clone(),
            tls: self.tls.clone(),
            filter: self
                .filter
                .as_ref()
                .map(|(guest, links)| (guest.on_worker(worker), links.clone())),
        })
    }
}

/// A proxy route on one worker: with a filter, the filter's slot there.
struct WorkerProxy {
    config: Arc<ProxyConfig>,
    tls: Option<Arc<rustls::ClientConfig>>,
    filter: Option<(Rc<dyn AttachedSlot>, Arc<FilterLinks>)>,
}

impl WorkerRoute for WorkerProxy {
    /// Opens the upstream connection; the client's answer waits for it.
    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> LocalFuture<'a, Result<Accepted, Refusal>> {
        let target = match upstream_target(&self.config.path, up.params, up.uri.query()) {
            Ok(target) => target,
            Err(why) => {
                debug!(upstream = %self.config.upstream, path = up.uri.path(), error = %why, "path parameter refused");
                return Box::pin(std::future::ready(Err(Refusal {
                    status: StatusCode::BAD_REQUEST,
                    body: "a path parameter may not be . or .., or hold a slash, backslash \
                           or control character (raw or percent-encoded)\n",
                    retry_after: None,
                })));
            }
        };
        // The filter's open event: the client's target and parameters.
        let filter = self.filter.as_ref().map(|(slot, links)| {
            let target = up
                .uri
                .path_and_query()
                .map_or_else(|| up.uri.path(), |pq| pq.as_str());
            let mut info = Vec::with_capacity(16 + target.len());
            weir_abi::encode_conn_info(&mut info, target, up.params.iter().copied(), &[]);
            LinkFilter {
                slot: slot.clone(),
                links: links.clone(),
                shared: Arc::new(filter::FilterLink::new()),
                queued: [Cell::new(0), Cell::new(0)],
                info: RefCell::new(info),
            }
        });
        let mut masks = Masks::new();
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&masks.next_u64().to_le_bytes());
        key[8..].copy_from_slice(&masks.next_u64().to_le_bytes());
        let req =
            dial::UpstreamRequest::new(&self.config, target, up.headers, up.peer, up.secure, key);
        let outbound = up.outbound.clone();
        Box::pin(async move {
            let config = &self.config;
            let dialed = match tokio::time::timeout(
                config.connect_timeout,
                dial::dial(config, self.tls.as_ref(), &req),
            )
            .await
            {
                Ok(Ok(dialed)) => dialed,
                Ok(Err(e)) => {
                    debug!(upstream = %config.upstream, target = %req.target, error = %e, "upstream refused");
                    return Err(Refusal {
                        status: StatusCode::BAD_GATEWAY,
                        body: "the upstream server is unreachable or refused the WebSocket\n",
                        retry_after: None,
                    });
                }
                Err(_) => {
                    debug!(upstream = %config.upstream, target = %req.target, "upstream timed out");
                    return Err(Refusal {
                        status: StatusCode::GATEWAY_TIMEOUT,
                        body: "the upstream server did not answer in time\n",
                        retry_after: None,
                    });
                }
            };
            let protocol = dialed.protocol.clone();
            let proxy = Proxy::new(dialed, &outbound, masks, filter);
            Ok(Accepted {
                protocol,
                behaviour: Box::new(proxy),
            })
        })
    }
}
