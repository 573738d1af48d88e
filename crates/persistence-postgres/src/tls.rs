//! TLS, as libpq reads a connection string's `sslmode` and `sslrootcert`.
//!
//! | `sslmode` | encrypted | certificate checked |
//! |---|---|---|
//! | `disable` | no | - |
//! | `prefer` (the default) | when the server offers it | no |
//! | `require` | yes | no; as `verify-ca` with an `sslrootcert` |
//! | `verify-ca` | yes | signed by a root of `sslrootcert` (the webpki roots without one) |
//! | `verify-full` | yes | as `verify-ca`, and issued for the host connected to |
//!
//! So a server with a self-signed certificate (Debian's default PostgreSQL
//! has `ssl = on` with its "snakeoil" certificate) is reached with the
//! default `prefer`, encrypted, as `psql` reaches it; a client that must
//! know who it talks to says `verify-full`. The driver (tokio-postgres
//! 0.7) reads neither `verify-*` nor `sslrootcert`: both are taken out of
//! the connection string here, before it reads the rest.
//!
//! Without the crate's `tls` feature the store connects in plain text:
//! `prefer` does, `require` fails to connect, and `verify-*` or
//! `sslrootcert` is refused on open.

use tokio_postgres::config::SslMode;

use crate::url::percent_decoded;

/// What a connection string asks of TLS beyond what the driver reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsParams {
    /// `verify-ca` or `verify-full`, which the driver is told as `require`.
    verify: Option<Verify>,
    /// `sslrootcert`: a PEM file of the roots to trust, or `system`.
    root_cert: Option<String>,
}

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Signed by a trusted root.
    Chain,
    /// Signed by a trusted root and issued for the host.
    Full,
}

impl TlsParams {
    /// Takes `sslmode=verify-ca|verify-full` (written back as `require`)
    /// and `sslrootcert` out of `conn`, a `postgres://` URL or a
    /// `key=value` string, and returns what the driver is to read. An
    /// `sslmode` the driver reads (`disable`, `prefer`, `require`) stays.
    pub(crate) fn take(conn: &str) -> Result<(String, TlsParams), String> {
        let mut params = TlsParams::default();
        let mut keep = |key: &str, value: &str| -> Result<Option<String>, String> {
            match key {
                "sslmode" => match value {
                    "verify-ca" | "verify-full" => {
                        params.verify = Some(if value == "verify-ca" { Verify::Chain } else { Verify::Full });
                        Ok(Some("require".to_owned()))
                    }
                    _ => Ok(Some(value.to_owned())),
                },
                "sslrootcert" if value.is_empty() => Err("`sslrootcert` is empty".to_owned()),
                "sslrootcert" => {
                    params.root_cert = Some(value.to_owned());
                    Ok(None)
                }
                _ => Ok(Some(value.to_owned())),
            }
        };
        let rest = match conn.split_once("://") {
            Some((scheme, rest)) => {
                // The driver takes the user-info up to the first '@', a
                // password holding '?' included.
                let host_at = rest.find('@').map_or(0, |at| at + 1);
                let (before, query) = match rest[host_at..].find('?') {
                    Some(q) => (&rest[..host_at + q], &rest[host_at + q + 1..]),
                    None => return Ok((conn.to_owned(), params)),
                };
                let mut kept = Vec::new();
                for pair in query.split('&') {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if !matches!(key, "sslmode" | "sslrootcert") {
                        kept.push(pair.to_owned());
                        continue;
                    }
                    if let Some(value) = keep(key, &percent_decoded(value)?)? {
                        kept.push(format!("{key}={value}"));
                    }
                }
                match kept.is_empty() {
                    true => format!("{scheme}://{before}"),
                    false => format!("{scheme}://{before}?{}", kept.join("&")),
                }
            }
            None => {
                let mut kept = Vec::new();
                for (key, value, whole) in key_values(conn)? {
                    if !matches!(key.as_str(), "sslmode" | "sslrootcert") {
                        kept.push(whole);
                    } else if let Some(value) = keep(&key, &value)? {
                        kept.push(format!("{key}={value}"));
                    }
                }
                kept.join(" ")
            }
        };
        Ok((rest, params))
    }

    /// The check of the server's certificate for a connection the driver
    /// makes in `mode`: none for `prefer`, and for `require` without
    /// `sslrootcert` (libpq's reading); `None` for no TLS at all.
    pub(crate) fn verify(&self, mode: SslMode) -> Option<Option<Verify>> {
        match (mode, self.verify) {
            (SslMode::Disable, _) => None,
            (_, Some(v)) => Some(Some(v)),
            (SslMode::Require, None) if self.root_cert.is_some() => Some(Some(Verify::Chain)),
            _ => Some(None),
        }
    }

    /// The PEM file of `sslrootcert`, unless it says `system` (the
    /// webpki roots, as without one).
    #[cfg(any(feature = "tls", test))]
    pub(crate) fn root_file(&self) -> Option<std::path::PathBuf> {
        self.root_cert.as_deref().filter(|r| *r != "system").map(std::path::PathBuf::from)
    }
}

/// The `key=value` pairs of a libpq keyword string, each with its text as
/// written; a value may be single-quoted, with `\'` and `\\` inside.
fn key_values(conn: &str) -> Result<Vec<(String, String, String)>, String> {
    let mut pairs = Vec::new();
    let mut rest = conn.trim_start();
    while !rest.is_empty() {
        let eq = rest.find('=').ok_or_else(|| format!("`{rest}` is not `key=value`"))?;
        let key = rest[..eq].trim().to_owned();
        let after = rest[eq + 1..].trim_start();
        let (value, len) = match after.strip_prefix('\'') {
            Some(quoted) => {
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let end = loop {
                    match chars.next() {
                        Some((_, '\\')) => value.extend(chars.next().map(|(_, c)| c)),
                        Some((i, '\'')) => break i + 2,
                        Some((_, c)) => value.push(c),
                        None => return Err(format!("the value of `{key}` has no closing quote")),
                    }
                };
                (value, end)
            }
            None => {
                let end = after.find(char::is_whitespace).unwrap_or(after.len());
                (after[..end].to_owned(), end)
            }
        };
        let whole_len = rest.len() - after.len() + len;
        pairs.push((key, value, rest[..whole_len].to_owned()));
        rest = rest[whole_len..].trim_start();
    }
    Ok(pairs)
}

#[cfg(feature = "tls")]
pub(crate) use with_rustls::connector;

/// The rustls client for each `sslmode`.
#[cfg(feature = "tls")]
mod with_rustls {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
    use tokio_postgres_rustls::MakeRustlsConnect;

    use super::{TlsParams, Verify};

    /// The TLS connector for `params` with a check of the certificate as
    /// `verify` says; `Err` says why it cannot be made (an `sslrootcert`
    /// that cannot be read).
    pub(crate) fn connector(params: &TlsParams, verify: Option<Verify>) -> Result<MakeRustlsConnect, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("setting up TLS: {e}"))?;
        let lenient = |chain| Arc::new(Lenient { provider: provider.clone(), chain });
        let config = match verify {
            None => builder.dangerous().with_custom_certificate_verifier(lenient(None)).with_no_client_auth(),
            Some(verify) => {
                let roots = Arc::new(roots(params)?);
                let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|e| format!("setting up TLS: {e}"))?;
                match verify {
                    Verify::Full => builder.with_webpki_verifier(webpki).with_no_client_auth(),
                    Verify::Chain => builder
                        .dangerous()
                        .with_custom_certificate_verifier(lenient(Some(webpki)))
                        .with_no_client_auth(),
                }
            }
        };
        Ok(MakeRustlsConnect::new(config))
    }

    /// The roots of `sslrootcert`, or the webpki roots.
    fn roots(params: &TlsParams) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        let Some(file) = params.root_file() else {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            return Ok(roots);
        };
        let shown = file.display();
        for cert in
            CertificateDer::pem_file_iter(&file).map_err(|e| format!("reading sslrootcert {shown}: {e}"))?
        {
            let cert = cert.map_err(|e| format!("reading sslrootcert {shown}: {e}"))?;
            roots.add(cert).map_err(|e| format!("sslrootcert {shown}: {e}"))?;
        }
        if roots.is_empty() {
            return Err(format!("sslrootcert {shown} holds no PEM certificate"));
        }
        Ok(roots)
    }

    /// The check of `prefer`, `require` (no `chain`: the certificate is
    /// taken as it comes) and `verify-ca` (the webpki check but for the
    /// host name, which webpki checks last, once the chain is good). The
    /// handshake's signatures are checked against the certificate either
    /// way.
    #[derive(Debug)]
    struct Lenient {
        provider: Arc<CryptoProvider>,
        chain: Option<Arc<WebPkiServerVerifier>>,
    }

    impl ServerCertVerifier for Lenient {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
            match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider.signature_verification_algorithms.supported_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn take(conn: &str) -> (String, TlsParams) {
        TlsParams::take(conn).unwrap_or_else(|e| panic!("{conn}: {e}"))
    }

    #[test]
    fn verify_modes_and_root_certs_are_taken_out_of_a_url() {
        let (rest, p) =
            take("postgres://u@h/db?application_name=x&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem");
        assert_eq!(rest, "postgres://u@h/db?application_name=x&sslmode=require");
        assert_eq!((p.verify, p.root_file()), (Some(Verify::Full), Some(PathBuf::from("/tmp/ca.pem"))));
        assert_eq!(p.verify(SslMode::Require), Some(Some(Verify::Full)));

        let (rest, p) = take("postgres://u@h/db?sslrootcert=/ca.pem");
        assert_eq!(rest, "postgres://u@h/db");
        assert_eq!(p.verify(SslMode::Require), Some(Some(Verify::Chain)), "require with a root file");
        assert_eq!(p.verify(SslMode::Prefer), Some(None), "prefer never checks");
        assert_eq!(p.verify(SslMode::Disable), None);

        let (rest, p) = take("postgres://u@h/db?sslmode=prefer");
        assert_eq!((rest.as_str(), p), ("postgres://u@h/db?sslmode=prefer", TlsParams::default()));
        let (rest, p) = take("postgres://u:p?q@h/db?sslrootcert=/ca.pem");
        assert_eq!((rest.as_str(), p.root_file()), ("postgres://u:p?q@h/db", Some(PathBuf::from("/ca.pem"))));
        assert!(TlsParams::take("postgres://h/db?sslrootcert=%ZZ").is_err());
        assert!(TlsParams::take("postgres://h/db?sslrootcert=").is_err());
    }

    #[test]
    fn verify_modes_and_root_certs_are_taken_out_of_key_values() {
        let (rest, p) = take("host=h user='a b' sslmode=verify-ca sslrootcert='/my certs/ca.pem' dbname=d");
        assert_eq!(rest, "host=h user='a b' sslmode=require dbname=d");
        assert_eq!((p.verify, p.root_file()), (Some(Verify::Chain), Some(PathBuf::from("/my certs/ca.pem"))));
        let (rest, p) = take("host=h sslrootcert=system sslmode=verify-full");
        assert_eq!((rest.as_str(), p.root_file()), ("host=h sslmode=require", None));
        assert_eq!(p.verify(SslMode::Require), Some(Some(Verify::Full)));
        assert!(TlsParams::take("host=h sslrootcert='/unclosed").is_err());
    }
}
