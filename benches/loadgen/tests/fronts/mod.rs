//! Fronts for the test servers of `verify.rs`: TLS termination (rustls with
//! an rcgen certificate) and RFC 8441 (an `h2` server with extended CONNECT,
//! h2c or over TLS with ALPN h2), each passing a connection's or stream's
//! bytes to a plain HTTP/1.1 test server and back unchanged. So weir-load's
//! `wss://` and `--h2` paths meet the same correct and wrong servers as
//! `ws://`. A front runs on a thread of its own with a tokio runtime; it
//! ends with the test process.

use bytes::Bytes;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// What a front speaks to the client.
#[derive(Clone, Copy, PartialEq)]
pub enum Front {
    /// TLS, then the client's HTTP/1.1 upgrade passed on as it is.
    Tls,
    /// HTTP/2 with prior knowledge (h2c).
    H2c,
    /// TLS with ALPN h2, then HTTP/2.
    H2Tls,
}

/// A certificate for localhost and 127.0.0.1 written to a fresh directory:
/// (its PEM path, the server's TLS configuration).
fn certificate(alpn: &[u8]) -> (PathBuf, Arc<rustls::ServerConfig>) {
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let dir = std::env::temp_dir().join(format!(
        "weir-load-front-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cert.pem");
    std::fs::write(&path, made.cert.pem()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(made.signing_key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![made.cert.der().clone()], key)
        .unwrap();
    config.alpn_protocols = vec![alpn.to_vec()];
    (path, Arc::new(config))
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Starts a front before the server on `backend`; returns its port and,
/// for the TLS fronts, the certificate to trust.
pub fn start(front: Front, backend: u16) -> (u16, Option<PathBuf>) {
    let (cert, acceptor) = match front {
        Front::H2c => (None, None),
        Front::Tls => {
            let (p, c) = certificate(b"http/1.1");
            (Some(p), Some(TlsAcceptor::from(c)))
        }
        Front::H2Tls => {
            let (p, c) = certificate(b"h2");
            (Some(p), Some(TlsAcceptor::from(c)))
        }
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                tcp.set_nodelay(true).ok();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match (front, acceptor) {
                        (Front::H2c, _) => serve_h2(tcp, backend).await,
                        (Front::Tls, Some(a)) => {
                            if let Ok(tls) = a.accept(tcp).await {
                                pass_through(tls, backend).await;
                            }
                        }
                        (Front::H2Tls, Some(a)) => {
                            if let Ok(tls) = a.accept(tcp).await {
                                serve_h2(tls, backend).await;
                            }
                        }
                        _ => unreachable!(),
                    }
                });
            }
        });
    });
    (port, cert)
}

/// Bytes both ways between the decrypted client connection and the backend.
async fn pass_through<T: AsyncRead + AsyncWrite + Unpin>(mut client: T, backend: u16) {
    let Ok(mut up) = TcpStream::connect(("127.0.0.1", backend)).await else {
        return;
    };
    up.set_nodelay(true).ok();
    let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
}

/// HTTP/2 with extended CONNECT: each `:protocol = websocket` stream is
/// upgraded on a new backend connection, answered 200, then passed through.
async fn serve_h2<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: T, backend: u16) {
    let Ok(mut conn) = h2::server::Builder::new()
        .enable_connect_protocol()
        .initial_window_size(1 << 20)
        .handshake::<T, Bytes>(io)
        .await
    else {
        return;
    };
    while let Some(Ok((req, mut respond))) = conn.accept().await {
        tokio::spawn(async move {
            let path = req.uri().path().to_string();
            let Some(mut up) = upgrade(backend, &path).await else {
                let mut r = http::Response::new(());
                *r.status_mut() = http::StatusCode::BAD_GATEWAY;
                let _ = respond.send_response(r, true);
                return;
            };
            let Ok(mut send) = respond.send_response(http::Response::new(()), false) else {
                return;
            };
            let mut body = req.into_body();
            let (mut rd, mut wr) = up.split();
            let to_backend = async {
                while let Some(Ok(chunk)) = body.data().await {
                    let _ = body.flow_control().release_capacity(chunk.len());
                    if wr.write_all(&chunk).await.is_err() {
                        break;
                    }
                }
                let _ = wr.shutdown().await;
            };
            let from_backend = async {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match rd.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if send
                                .send_data(Bytes::copy_from_slice(&buf[..n]), false)
                                .is_err()
                            {
                                break;
                            }
                        }
                    }
                }
                let _ = send.send_data(Bytes::new(), true);
            };
            tokio::join!(to_backend, from_backend);
            up.shutdown().await.ok();
        });
    }
}

/// An HTTP/1.1 upgrade to `path` on the backend; the socket once it said 101.
async fn upgrade(backend: u16, path: &str) -> Option<TcpStream> {
    let mut up = TcpStream::connect(("127.0.0.1", backend)).await.ok()?;
    up.set_nodelay(true).ok();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    up.write_all(req.as_bytes()).await.ok()?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        up.read_exact(&mut b).await.ok()?;
        head.push(b[0]);
    }
    head.starts_with(b"HTTP/1.1 101").then_some(up)
}
