//! `auth init --tls`: a private CA, a server certificate for nats-server and a client
//! certificate for mutual TLS, so a lab can encrypt its bus without outside tooling.

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use std::path::Path;

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

    let mut server = CertificateParams::new(hosts.to_vec())
        .context("--tls-host: not a valid host name or IP")?;
    server
        .distinguished_name
        .push(DnType::CommonName, "ytsched nats-server");
    let server_key = KeyPair::generate()?;
    let server_cert = server.signed_by(&server_key, &ca, &ca_key)?;
    write(dir, "server.pem", &server_cert.pem(), 0o644)?;
    write(dir, "server-key.pem", &server_key.serialize_pem(), 0o600)?;

    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client
        .distinguished_name
        .push(DnType::CommonName, "ytsched client");
    let client_key = KeyPair::generate()?;
    let client_cert = client.signed_by(&client_key, &ca, &ca_key)?;
    write(dir, "client.pem", &client_cert.pem(), 0o644)?;
    write(dir, "client-key.pem", &client_key.serialize_pem(), 0o600)?;
    Ok(())
}

fn write(dir: &Path, name: &str, text: &str, mode: u32) -> anyhow::Result<()> {
    crate::auth::write_atomically(&dir.join(name), text, mode)
}
