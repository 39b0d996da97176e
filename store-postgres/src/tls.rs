//! TLS to the server with rustls (the `ring` provider the workspace already uses), with
//! libpq's meanings of `sslmode`:
//!
//! | `sslmode`     | encrypted                 | certificate checked                   |
//! |---------------|---------------------------|---------------------------------------|
//! | `disable`     | never                     | –                                     |
//! | `prefer`      | if the server offers TLS  | no                                    |
//! | `require`     | always, else the open fails | no (as `verify-ca` if a root file is given or `~/.postgresql/root.crt` exists) |
//! | `verify-ca`   | always                    | signed by a root of `sslrootcert`     |
//! | `verify-full` | always                    | and issued for the host name          |
//!
//! The default is libpq's, `prefer`. As in libpq, `sslmode` is ignored on Unix sockets
//! (PostgreSQL does no TLS there, and nothing leaves the host).
//! Roots come from `sslrootcert=FILE` (PEM), else `~/.postgresql/root.crt`. Channel binding
//! (`tls-server-end-point`) is not offered: SCRAM still authenticates both ends by password.
//!
//! Hand-written on tokio-postgres's public TLS traits (~150 lines) rather than taken from
//! `tokio-postgres-rustls`, which would bring a second `sha2`/`digest` and the `x509-cert`
//! family to the lock file for channel binding only; rustls and tokio-rustls are already
//! there (hyper-rustls).

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use postgres::Socket;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `sslmode`, with libpq's five values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS if the server offers it, without checking its certificate; else plaintext.
    Prefer,
    /// TLS or fail; the certificate is not checked (unless roots are configured).
    Require,
    /// TLS or fail; the certificate must chain to a configured root.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must be issued for the host connected to.
    VerifyFull,
}

impl SslMode {
    /// Parses a libpq `sslmode` value.
    pub fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// The mode the client library enforces (it knows disable, prefer and require).
    pub(crate) fn client_mode(self) -> postgres::config::SslMode {
        match self {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => postgres::config::SslMode::Require,
        }
    }
}

/// How certificates are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

/// Why TLS cannot be set up as the connection string asks.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error("sslrootcert={}: {source}", file.display())]
    Read { file: PathBuf, source: std::io::Error },
    #[error("sslrootcert={}: not a PEM certificate file: {source}", file.display())]
    NotPem { file: PathBuf, source: rustls::pki_types::pem::Error },
    #[error("sslrootcert={}: {source}", file.display())]
    Certificate { file: PathBuf, source: rustls::Error },
    #[error("sslrootcert={}: no certificate in the file", file.display())]
    NoCertificate { file: PathBuf },
    #[error(
        "sslmode={mode}: no root certificate to verify the server against: give sslrootcert=FILE (PEM) or put the \
         root in ~/.postgresql/root.crt"
    )]
    NoRoot { mode: &'static str },
    #[error("TLS set-up: {0}")]
    Setup(rustls::Error),
}

/// The roots of `sslrootcert` (or libpq's default file), if any.
pub(crate) fn load_roots(file: Option<&Path>) -> Result<Option<(PathBuf, RootCertStore)>, TlsError> {
    let path = match file {
        Some(f) => f.to_path_buf(),
        None => match std::env::var_os("HOME") {
            Some(home) => {
                let default = Path::new(&home).join(".postgresql/root.crt");
                if !default.is_file() {
                    return Ok(None);
                }
                default
            }
            None => return Ok(None),
        },
    };
    let bytes = std::fs::read(&path).map_err(|source| TlsError::Read { file: path.clone(), source })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert.map_err(|source| TlsError::NotPem { file: path.clone(), source })?;
        roots.add(cert).map_err(|source| TlsError::Certificate { file: path.clone(), source })?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoCertificate { file: path });
    }
    Ok(Some((path, roots)))
}

/// The connector for `mode` with `roots` (`None` when there is no root file).
pub(crate) fn connector(mode: SslMode, roots: Option<RootCertStore>) -> Result<Option<RustlsConnect>, TlsError> {
    let check = match (mode, roots.is_some()) {
        (SslMode::Disable, _) => return Ok(None),
        (SslMode::Prefer, _) | (SslMode::Require, false) => Check::Nothing,
        (SslMode::Require | SslMode::VerifyCa, true) => Check::Chain,
        (SslMode::VerifyFull, true) => Check::ChainAndName,
        (SslMode::VerifyCa | SslMode::VerifyFull, false) => {
            return Err(TlsError::NoRoot { mode: if mode == SslMode::VerifyCa { "verify-ca" } else { "verify-full" } })
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(Verifier {
        roots: roots.map(Arc::new),
        check,
        algorithms: provider.signature_verification_algorithms,
    });
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(RustlsConnect { config: Arc::new(config) }))
}

/// Checks the server's certificate as the mode says; handshake signatures are always checked.
#[derive(Debug)]
struct Verifier {
    roots: Option<Arc<RootCertStore>>,
    check: Check,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let (Some(roots), true) = (&self.roots, self.check != Check::Nothing) else {
            return Ok(ServerCertVerified::assertion());
        };
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        if self.check == Check::ChainAndName {
            rustls::client::verify_server_name(&cert, server_name)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// tokio-postgres's [`MakeTlsConnect`] on rustls.
#[derive(Clone)]
pub(crate) struct RustlsConnect {
    config: Arc<ClientConfig>,
}

impl MakeTlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnectOne;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnectOne, io::Error> {
        // An empty domain is a Unix socket, where the server never starts TLS: any name does.
        let name = if domain.is_empty() { "localhost" } else { domain };
        let name = ServerName::try_from(name.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("TLS server name {domain:?}: {e}")))?;
        Ok(RustlsConnectOne { config: self.config.clone(), name })
    }
}

/// One connection's handshake.
pub(crate) struct RustlsConnectOne {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl TlsConnect<Socket> for RustlsConnectOne {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let tls = tokio_rustls::TlsConnector::from(self.config).connect(self.name, stream).await?;
            Ok(RustlsStream(Box::new(tls)))
        })
    }
}

/// An encrypted connection.
pub(crate) struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl AsyncRead for RustlsStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
