//! The outbound client's connector: plain TCP for `http://`, rustls (ring,
//! TLS 1.3 and 1.2, HTTP/1.1 by ALPN) over it for `https://`, the server's
//! certificate checked against a route's `outbound_ca` or webpki-roots
//! (the same settings as the proxy's `wss://` upstreams). hyper's pool
//! keeps either kind of connection for the next request to its origin.
//! A host name is resolved once, here ([`CheckedResolver`]), and the
//! connection goes to the addresses that were checked: without the
//! route's `allow_private`, a name that resolves to a non-global address
//! is refused ([`PrivateAddress`]). An IP address in the URL is not
//! resolved (the allow-list entry named it).

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::Uri;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Opens a connection for the client: TCP, then TLS for `https`.
#[derive(Clone)]
pub struct Connector {
    tcp: HttpConnector<CheckedResolver>,
    tls: TlsConnector,
}

impl Connector {
    /// A connector whose https servers are checked against `ca` (PEM), or
    /// webpki-roots without one; host names may resolve to non-global
    /// addresses only with `allow_private`.
    pub fn new(ca: Option<&Path>, allow_private: bool) -> Result<Connector, OutboundCaError> {
        let config = weir_config::tls::client_config(ca)?;
        let mut tcp = HttpConnector::new_with_resolver(CheckedResolver { allow_private });
        // Small requests and answers: no Nagle delay on either side.
        tcp.set_nodelay(true);
        // The URL's scheme is ours to check (https goes through TLS here).
        tcp.enforce_http(false);
        Ok(Connector {
            tcp,
            tls: TlsConnector::from(config),
        })
    }
}

/// Why a route's `outbound_ca` cannot check https servers.
#[derive(Debug, thiserror::Error)]
#[error("outbound_ca {0}")]
pub struct OutboundCaError(#[from] weir_config::tls::CaError);

/// A host name that resolved to an address off the public internet, on a
/// route without `allow_private` (a guest sees `refused`).
#[derive(Debug, thiserror::Error)]
#[error(
    "{name} resolves to {address}, which is not a global address; \
     set allow_private = true on the route to allow it"
)]
pub struct PrivateAddress {
    name: String,
    address: IpAddr,
}

/// The connector's one DNS lookup (the system resolver, on tokio's
/// blocking pool): every address is checked before any is returned, and
/// hyper connects only to the addresses returned, so a second answer
/// (DNS rebinding) never reaches a socket.
#[derive(Clone)]
pub struct CheckedResolver {
    /// Non-global addresses are allowed too (the route's `allow_private`).
    allow_private: bool,
}

type Resolving =
    Pin<Box<dyn Future<Output = Result<std::vec::IntoIter<SocketAddr>, io::Error>> + Send>>;

impl tower_service::Service<Name> for CheckedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = Resolving;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let name = name.as_str().to_string();
            // Port 0: hyper sets the URL's port on each address.
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            if !allow_private {
                if let Some(addr) = addrs
                    .iter()
                    .find(|a| !weir_config::url_check::is_global(a.ip()))
                {
                    let address = addr.ip();
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        PrivateAddress { name, address },
                    ));
                }
            }
            Ok(addrs.into_iter())
        })
    }
}

/// A connection to an origin, plain or TLS.
pub enum Stream {
    Plain(TokioIo<TcpStream>),
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
}

type Connecting = Pin<Box<dyn Future<Output = Result<Stream, io::Error>> + Send>>;

impl tower_service::Service<Uri> for Connector {
    type Response = Stream;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        self.tcp.poll_ready(cx).map_err(io::Error::other)
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        let tls = (uri.scheme_str() == Some("https")).then(|| self.tls.clone());
        let host = uri.host().unwrap_or_default().to_string();
        let connecting = self.tcp.call(uri);
        Box::pin(async move {
            let tcp = connecting.await.map_err(io::Error::other)?;
            let Some(tls) = tls else {
                return Ok(Stream::Plain(tcp));
            };
            // An IPv6 literal comes bracketed in a URI; the name is without.
            let name = host.trim_start_matches('[').trim_end_matches(']');
            let name = weir_config::tls::server_name(name)?;
            let stream = tls.connect(name, tcp.into_inner()).await?;
            Ok(Stream::Tls(Box::new(TokioIo::new(stream))))
        })
    }
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Stream::Plain(tcp) => tcp.connected(),
            Stream::Tls(tls) => tls.inner().get_ref().0.connected(),
        }
    }
}

impl Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }
}
