//! HTTPS for the web face (`--http-tls-cert`, `--http-tls-key`): web tokens, an admin's
//! among them, must not cross the network in clear text while the bus is on TLS. The
//! certificate and key are PEM files (`ytsched auth init --tls` makes `tls/http.pem` and
//! `tls/http-key.pem` from its CA); rustls serves them.

use anyhow::Context;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_rustls::rustls;

#[derive(Clone, Debug, PartialEq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The TLS side of the listener, from the files; errors name the file and what is wrong.
pub fn acceptor(files: &TlsFiles) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .with_context(|| format!("--http-tls-cert {}: cannot read", files.cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| {
            format!(
                "--http-tls-cert {}: not PEM certificates",
                files.cert.display()
            )
        })?;
    if certs.is_empty() {
        anyhow::bail!(
            "--http-tls-cert {}: holds no certificate",
            files.cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).with_context(|| {
        format!(
            "--http-tls-key {}: not a PEM private key",
            files.key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| {
            format!(
                "--http-tls-cert {} and --http-tls-key {} do not make a key pair",
                files.cert.display(),
                files.key.display()
            )
        })?;
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_bad_files_are_refused_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("none.pem"),
            key: dir.path().join("none-key.pem"),
        };
        let e = format!("{:#}", acceptor(&files).err().expect("refused"));
        assert!(
            e.contains("--http-tls-cert") && e.contains("none.pem"),
            "{e}"
        );
        std::fs::write(&files.cert, "not pem").unwrap();
        let e = format!("{:#}", acceptor(&files).err().expect("refused"));
        assert!(e.contains("holds no certificate"), "{e}");
    }
}
