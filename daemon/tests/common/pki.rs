//! Test certificates, generated per test with rcgen and written as PEM files:
//! a CA, server and client certificates it signs (valid, expired, for another
//! name), and a second CA that the daemon does not trust.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};

/// A CA: its PEM file, and what signs with it.
pub struct Ca {
    pub pem: PathBuf,
    key: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    dir: PathBuf,
}

/// A certificate and its key, as PEM files.
pub struct Leaf {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How a leaf certificate is made.
pub struct LeafSpec<'a> {
    /// File name stem in the CA's directory.
    pub file: &'a str,
    /// DNS subject alternative names (none: the CN alone names it).
    pub dns: &'a [&'a str],
    pub common_name: &'a str,
    pub serial: u64,
    pub expired: bool,
    pub client: bool,
}

impl Ca {
    pub fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::CrlSign,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let pem = dir.join(format!("{name}.pem"));
        std::fs::write(&pem, cert.pem()).unwrap();
        let key_path = dir.join(format!("{name}.key"));
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        Ca {
            pem,
            key: key_path,
            issuer: Issuer::new(params, key),
            dir: dir.to_owned(),
        }
    }

    /// The CA's private key, for tools that sign with it (openssl).
    pub fn key_path(&self) -> &Path {
        &self.key
    }

    pub fn leaf(&self, spec: &LeafSpec<'_>) -> Leaf {
        let names: Vec<String> = spec.dns.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, spec.common_name);
        params.serial_number = Some(SerialNumber::from(spec.serial));
        params.extended_key_usages = vec![if spec.client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        if spec.expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let leaf = Leaf {
            cert: self.dir.join(format!("{}.pem", spec.file)),
            key: self.dir.join(format!("{}.key", spec.file)),
        };
        std::fs::write(&leaf.cert, cert.pem()).unwrap();
        std::fs::write(&leaf.key, key.serialize_pem()).unwrap();
        leaf
    }

    /// A server certificate for `localhost` with serial `serial`.
    pub fn server(&self, file: &str, serial: u64) -> Leaf {
        self.leaf(&LeafSpec {
            file,
            dns: &["localhost"],
            common_name: "localhost",
            serial,
            expired: false,
            client: false,
        })
    }

    /// Writes `file`.pem, a CRL of this CA revoking the certificates with
    /// serials `revoked`, and returns its path.
    pub fn crl(&self, file: &str, number: u64, revoked: &[u64]) -> PathBuf {
        let params = rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2025, 1, 1),
            next_update: rcgen::date_time_ymd(2099, 1, 1),
            crl_number: SerialNumber::from(number),
            issuing_distribution_point: None,
            revoked_certs: revoked
                .iter()
                .map(|&serial| rcgen::RevokedCertParams {
                    serial_number: SerialNumber::from(serial),
                    revocation_time: rcgen::date_time_ymd(2025, 1, 1),
                    reason_code: None,
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        };
        let crl = params.signed_by(&self.issuer).unwrap();
        let path = self.dir.join(format!("{file}.pem"));
        std::fs::write(&path, crl.pem().unwrap()).unwrap();
        path
    }

    /// A client certificate named `name` (as its DNS SAN and CN).
    pub fn client(&self, file: &str, name: &str, expired: bool) -> Leaf {
        self.leaf(&LeafSpec {
            file,
            dns: &[name],
            common_name: name,
            serial: 7,
            expired,
            client: true,
        })
    }
}

/// A CA, a server certificate for localhost and a daemon serving it.
pub struct TlsSetup {
    pub dir: super::Scratch,
    pub ca: Ca,
    pub server: Leaf,
}

impl TlsSetup {
    pub fn new() -> TlsSetup {
        let dir = super::scratch_dir();
        let ca = Ca::new(&dir, "ca");
        let server = ca.server("server", 1);
        TlsSetup { dir, ca, server }
    }

    /// `tls = { … }` for this setup's server certificate, plus `extra` keys.
    pub fn tls_table(&self, extra: &str) -> String {
        format!(
            "tls = {{ cert = \"{}\", key = \"{}\"{extra} }}",
            self.server.cert.display(),
            self.server.key.display()
        )
    }

    pub fn daemon(&self, extra_tls: &str, rest: &str) -> super::Daemon {
        super::Daemon::with_config(&format!(
            "listen = [{{ address = \"127.0.0.1:0\", {} }}]\n{rest}",
            self.tls_table(extra_tls)
        ))
    }

    pub fn trust(&self) -> tcpmux::tls::TlsOptions {
        tcpmux::tls::TlsOptions {
            ca: Some(self.ca.pem.clone()),
            client_cert: None,
        }
    }
}

/// How openssl saw a connection asking for daytime: `New` or `Reused`,
/// writing its session to `session` (first) or resuming it.
pub fn openssl_session(port: u16, ca: &Path, session: &Path, resume: bool) -> String {
    super::require_program("openssl", "version", "openssl");
    let mut child = std::process::Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-CAfile", ca.to_str().unwrap(), "-verify_return_error"])
        .args(["-servername", "localhost", "-tls1_3", "-ign_eof"])
        .arg(if resume { "-sess_in" } else { "-sess_out" })
        .arg(session)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run openssl");
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, b"daytime\r\n").unwrap();
    drop(stdin);
    // daytime answers and closes: s_client ends with the server.
    let out = child.wait_with_output().expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("+\r\n"), "{text}");
    for kind in ["Reused", "New"] {
        if text.contains(&format!("{kind}, TLSv1.3")) {
            return kind.to_owned();
        }
    }
    panic!("no session line in {text}");
}
