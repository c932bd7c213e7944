//! `auth init --tls`: a private CA, a server certificate for nats-server, one for the
//! scheduler's web face (`http.pem`, `http-key.pem`) and a client certificate for mutual
//! TLS, so a lab can encrypt its bus and its web tokens without outside tooling.

use anyhow::Context;
use rcgen::{BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair};
use std::path::{Path, PathBuf};
use ytsched_common::transport::TlsFiles;

/// The CA certificate, and the certificate and key a client of nats-server presents,
/// as `make_ca_and_server_cert` writes them in `dir`.
pub fn client_files(dir: &Path) -> TlsFiles {
    TlsFiles {
        ca: Some(dir.join("ca.pem")),
        cert: Some(dir.join("client.pem")),
        key: Some(dir.join("client-key.pem")),
    }
}

/// nats-server's certificate and key in `dir`.
pub fn server_files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("server.pem"), dir.join("server-key.pem"))
}

/// nats-server's `tls` block for mutual TLS with the files in `dir`.
pub fn server_conf(dir: &Path) -> String {
    let (cert, key) = server_files(dir);
    format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n}}\n",
        cert.display(),
        key.display(),
        dir.join("ca.pem").display()
    )
}

pub fn make_ca_and_server_cert(dir: &Path, hosts: &[String]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "ytsched CA");
    let ca_key = KeyPair::generate()?;
    let ca = ca_params.self_signed(&ca_key)?;
    write(dir, "ca.pem", &ca.pem(), 0o644)?;
    let ca = (&ca, &ca_key);
    leaf(dir, "server", "ytsched nats-server", hosts, ca)
        .context("--tls-host: not a valid host name or IP")?;
    // The scheduler's web face (`--http-tls-cert`/`--http-tls-key`), for the same hosts.
    leaf(dir, "http", "ytsched web face", hosts, ca)?;
    leaf(dir, "client", "ytsched client", &[], ca)
}

/// A certificate signed by the CA: `<name>.pem` and its key `<name>-key.pem` (0600).
fn leaf(
    dir: &Path,
    name: &str,
    common_name: &str,
    hosts: &[String],
    (ca, ca_key): (&Certificate, &KeyPair),
) -> anyhow::Result<()> {
    let mut params = CertificateParams::new(hosts.to_vec())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, ca, ca_key)?;
    write(dir, &format!("{name}.pem"), &cert.pem(), 0o644)?;
    write(dir, &format!("{name}-key.pem"), &key.serialize_pem(), 0o600)
}

fn write(dir: &Path, name: &str, text: &str, mode: u32) -> anyhow::Result<()> {
    crate::secret_files::write_atomically(&dir.join(name), text, mode)
}
