//! TLS for the Postgres backend's connections: a tokio-postgres connector on
//! rustls (the crypto provider and the roots the Redis backends use), made
//! when the URL asks for TLS (`sslmode=require`).
//!
//! The server's certificate is always verified, against the builder's
//! `tls_root_certificate` when given, else the system's roots, and its name
//! against the host of the URL: `require` here is libpq's `verify-full`. A
//! client certificate (`tls_client_certificate`) is presented when given.
//! TLS channel binding (SCRAM-SHA-256-PLUS) is not offered: the server falls
//! back to SCRAM-SHA-256.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_rustls::TlsConnector;

use crate::BackendError;

/// The TLS material of the builder: PEM roots and a PEM client identity.
#[derive(Debug, Clone, Default)]
pub(crate) struct PgTlsMaterial {
    pub(crate) root_pem: Option<Vec<u8>>,
    pub(crate) identity_pem: Option<(Vec<u8>, Vec<u8>)>,
}

/// A tokio-postgres TLS connector on rustls, or none (plain TCP).
#[derive(Clone, Default)]
pub(crate) struct PgTls {
    config: Option<Arc<ClientConfig>>,
}

impl std::fmt::Debug for PgTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTls")
            .field("tls", &self.config.is_some())
            .finish()
    }
}

fn tls_error(what: &str, detail: impl std::fmt::Display) -> BackendError {
    BackendError::Protocol(format!("postgres TLS: {what}: {detail}"))
}

impl PgTls {
    /// Whether connections are made with TLS.
    pub(crate) fn enabled(&self) -> bool {
        self.config.is_some()
    }

    /// A connector verifying servers against `material`'s roots (else the
    /// system's), presenting its client identity when given.
    pub(crate) fn new(material: &PgTlsMaterial) -> Result<Self, BackendError> {
        let mut roots = RootCertStore::empty();
        match &material.root_pem {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| tls_error("the root certificate", e))?;
                    roots
                        .add(cert)
                        .map_err(|e| tls_error("the root certificate", e))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                for cert in found.certs {
                    // A system root rustls cannot parse is skipped, as the
                    // Redis backends' connector does.
                    let _ = roots.add(cert);
                }
            }
        }
        if roots.is_empty() {
            return Err(tls_error(
                "no root certificate",
                "give tls_root_certificate, or install the system's CA certificates",
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error("protocol versions", e))?
            .with_root_certificates(roots);
        let config = match &material.identity_pem {
            Some((cert_pem, key_pem)) => {
                let certs = CertificateDer::pem_slice_iter(cert_pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| tls_error("the client certificate", e))?;
                let key = PrivateKeyDer::from_pem_slice(key_pem)
                    .map_err(|e| tls_error("the client key", e))?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| tls_error("the client certificate", e))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(PgTls {
            config: Some(Arc::new(config)),
        })
    }
}

impl<S> MakeTlsConnect<S> for PgTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnector;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnector, io::Error> {
        // tokio-postgres asks for a connector before it knows whether it
        // will use it. Without TLS the connections are made with
        // `sslmode=disable`, so it never does.
        let Some(config) = &self.config else {
            return Ok(RustlsConnector { tls: None });
        };
        let name = ServerName::try_from(domain.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(RustlsConnector {
            tls: Some((name, TlsConnector::from(config.clone()))),
        })
    }
}

/// The connector of one connection (its server name), if TLS is on.
pub(crate) struct RustlsConnector {
    tls: Option<(ServerName<'static>, TlsConnector)>,
}

impl<S> TlsConnect<S> for RustlsConnector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let Some((name, connector)) = self.tls else {
                return Err(io::Error::other(
                    "TLS is not configured for this connection",
                ));
            };
            connector.connect(name, stream).await.map(RustlsStream)
        })
    }
}

/// A TLS stream of one connection.
pub(crate) struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S> AsyncRead for RustlsStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S> AsyncWrite for RustlsStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S> TlsStream for RustlsStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

/// `config` as it is connected with `tls`: `sslmode=disable` without TLS
/// (so that `prefer`, tokio-postgres's default, never tries a certificate
/// it cannot verify), as given with it.
pub(crate) fn effective(config: &tokio_postgres::Config, tls: &PgTls) -> tokio_postgres::Config {
    let mut config = config.clone();
    if !tls.enabled() {
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
    }
    config
}
