//! Per-server TLS material: a self-signed CA and a server certificate signed by it.

use std::path::{Path, PathBuf};
use std::sync::Once;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// Certificates written into a server's directory.
#[derive(Debug)]
pub(crate) struct TlsFiles {
    /// The CA certificate, PEM.
    pub(crate) ca_pem: Vec<u8>,
    /// Path of the CA certificate (`--tls-ca-cert-file`).
    pub(crate) ca_path: PathBuf,
    /// Path of the server certificate (`--tls-cert-file`).
    pub(crate) cert_path: PathBuf,
    /// Path of the server's private key (`--tls-key-file`).
    pub(crate) key_path: PathBuf,
}

impl TlsFiles {
    /// Generates a CA and a server certificate for `127.0.0.1` / `localhost` into `dir`.
    pub(crate) fn generate(dir: &Path) -> TlsFiles {
        let fail = |what: &str, e: rcgen::Error| -> ! {
            panic!("lock-test-support: cannot generate the TLS {what}: {e}")
        };

        let ca_key = KeyPair::generate().unwrap_or_else(|e| fail("CA key", e));
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| fail("CA", e));
        ca_params.distinguished_name = common_name("lock-test-support test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .unwrap_or_else(|e| fail("CA certificate", e));

        let server_key = KeyPair::generate().unwrap_or_else(|e| fail("server key", e));
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .unwrap_or_else(|e| fail("server certificate", e));
        params.distinguished_name = common_name("localhost");
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let server_cert = params
            .signed_by(&server_key, &ca_cert, &ca_key)
            .unwrap_or_else(|e| fail("server certificate", e));

        let files = TlsFiles {
            ca_pem: ca_cert.pem().into_bytes(),
            ca_path: dir.join("ca.crt"),
            cert_path: dir.join("server.crt"),
            key_path: dir.join("server.key"),
        };
        for (path, contents) in [
            (&files.ca_path, ca_cert.pem()),
            (&files.cert_path, server_cert.pem()),
            (&files.key_path, server_key.serialize_pem()),
        ] {
            std::fs::write(path, contents)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        }
        files
    }
}

fn common_name(name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn
}

/// Installs rustls's `ring` crypto provider as the process default, once.
///
/// rustls 0.23 refuses to build a client config without a process-wide provider when more
/// than one (or none) is compiled in; an already-installed provider is kept.
pub(crate) fn ensure_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
