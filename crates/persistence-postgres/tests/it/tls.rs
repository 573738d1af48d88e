//! TLS against the test server, each `sslmode` as libpq reads it: `prefer`
//! and `require` encrypt without checking the certificate (so a server
//! with a self-signed one, as Debian's default, is reached), `verify-ca`
//! checks it against `sslrootcert`, `verify-full` the host name too.

use palimpsest_persistence::{SessionStore, StoreError};
use palimpsest_persistence_postgres::PgStore;

use crate::common::{url, TestSchema};

/// `url` with `params` added to its query string.
fn with(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

/// Opens a store in `schema` through `conn`, marked with an application
/// name of its own; whether its connection is encrypted, as the server
/// sees it.
fn open(schema: &TestSchema, conn: &str) -> Result<(PgStore, bool), StoreError> {
    let app = format!("tls_{}", schema.name);
    let store = PgStore::connect_with(&with(conn, &format!("application_name={app}")), schema.options())?;
    store.list()?;
    let mut admin = crate::common::admin().expect("the server, reached a moment ago");
    let row = admin
        .query_one(
            "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1",
            &[&app],
        )
        .expect("pg_stat_ssl");
    let encrypted: Option<bool> = row.get(0);
    Ok((store, encrypted.expect("the store's connection is listed")))
}

/// `err` and its causes, as the command-line tool shows them.
fn chain(err: &StoreError) -> String {
    let mut chain = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(c) = cause {
        chain.push_str(&format!(": {c}"));
        cause = c.source();
    }
    chain
}

#[test]
fn each_sslmode_encrypts_and_checks_as_libpq_does() {
    let Some(schema) = TestSchema::new() else { return };
    let mut admin = crate::common::admin().expect("the server");
    let ssl: String = admin.query_one("SHOW ssl", &[]).expect("SHOW ssl").get(0);
    let (_, encrypted) = open(&schema, &url()).expect("the default sslmode (prefer) connects");
    if ssl != "on" {
        assert!(!encrypted, "a server without TLS is reached in plain text");
        let err = open(&schema, &with(&url(), "sslmode=require")).map(|_| ()).expect_err("require");
        assert_eq!(err.code(), "io", "{err}");
        return;
    }
    assert!(encrypted, "prefer: encrypted when the server offers TLS");
    let (_, encrypted) = open(&schema, &with(&url(), "sslmode=require")).expect("require connects");
    assert!(encrypted, "require: encrypted");
    let (_, encrypted) = open(&schema, &with(&url(), "sslmode=disable")).expect("disable connects");
    assert!(!encrypted, "disable: plain text");

    // A certificate no public root signed (the test server's is its own,
    // unless it was given one of a public CA): refused by verify-full.
    let err = open(&schema, &with(&url(), "sslmode=verify-full")).map(|_| ()).expect_err("verify-full");
    assert_eq!(err.code(), "io", "{err}");
    assert!(chain(&err).contains("invalid peer certificate"), "{}", chain(&err));

    // Trusting the server's own certificate: verify-ca passes, and so
    // does require with that root.
    let cert: String = admin.query_one("SHOW ssl_cert_file", &[]).expect("SHOW ssl_cert_file").get(0);
    if std::fs::metadata(&cert).is_err() {
        return; // another machine's server: its certificate is not here to trust
    }
    let root = format!("sslrootcert={}", cert.replace('%', "%25").replace('&', "%26"));
    let (_, encrypted) =
        open(&schema, &with(&url(), &format!("sslmode=verify-ca&{root}"))).expect("verify-ca, its own root");
    assert!(encrypted);
    let (_, encrypted) = open(&schema, &with(&url(), &root)).expect("require-by-root connects");
    assert!(encrypted);
    // An empty root file trusts nothing.
    let dir = tempfile::tempdir().expect("a temp dir");
    let empty = dir.path().join("none.pem");
    std::fs::write(&empty, "").expect("write");
    let err = open(&schema, &with(&url(), &format!("sslmode=verify-ca&sslrootcert={}", empty.display())))
        .map(|_| ())
        .expect_err("no roots");
    assert!(chain(&err).contains("holds no PEM certificate"), "{}", chain(&err));
}
