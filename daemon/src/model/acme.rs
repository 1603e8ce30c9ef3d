//! ACME (RFC 8555) for a TLS listener (`tls = { acme = { ... } }`): the
//! settings and where their files live. The live slot that serves their
//! certificate is run-time state, in keys/.

use std::path::PathBuf;
use std::time::Duration;

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// A listener's `acme` table.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AcmeSettings {
    /// The directory URL (Let's Encrypt's, its staging one, a test server's).
    pub directory: String,
    /// The account's contact, `mailto:` added.
    pub email: Option<String>,
    /// The DNS names the certificate carries, lower case; the first names
    /// its files.
    pub names: Vec<String>,
    /// Where the account key and the certificates are kept (0600 files).
    pub storage: PathBuf,
    /// How long before its notAfter a certificate is renewed.
    pub renew_before: Duration,
    /// A CA to trust for the directory's HTTPS (a test server's), instead
    /// of the system's store.
    pub directory_ca: Option<PathBuf>,
    /// How long one request to the CA may take (`request_timeout`).
    pub request_timeout: Duration,
}

impl AcmeSettings {
    /// The file holding the certificate chain and its private key together,
    /// so that they are replaced as one.
    pub fn pair_name(&self) -> String {
        format!("{}.pem", self.file_stem())
    }

    /// The chain's and the key's files as releases before 0.2 kept them,
    /// read when there is no pair file.
    pub fn legacy_names(&self) -> (String, String) {
        let stem = self.file_stem();
        (format!("{stem}.crt.pem"), format!("{stem}.key.pem"))
    }

    /// The account's credentials, one account per directory.
    pub fn account_name(&self) -> String {
        let directory: String = self
            .directory
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        format!("account-{directory}.json")
    }

    fn file_stem(&self) -> String {
        let first = self.names.first().map_or("certificate", String::as_str);
        first.replace('*', "_wildcard_")
    }
}
