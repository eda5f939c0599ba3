//! A development CA and serving certificates (`nac certs`, local runs and tests). Not part of the library: the
//! `nac` binary and the tests include this file.

/// A development CA that issues serving certificates (for `nac certs`, local runs and tests).
pub struct DevCa {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    /// The CA certificate (PEM): the caBundle clients trust.
    pub cert_pem: String,
}

impl DevCa {
    pub fn new(days: u32) -> Result<DevCa, rcgen::Error> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, "nac-webhook-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let (nb, na) = validity(days);
        params.not_before = nb.into();
        params.not_after = na.into();
        let cert_pem = params.self_signed(&key)?.pem();
        Ok(DevCa { params, key, cert_pem })
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A serving certificate and key (PEM) for `hosts` (DNS names or IP addresses).
    pub fn issue(&self, hosts: &[String], days: u32) -> Result<(String, String), rcgen::Error> {
        use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose};
        let issuer = rcgen::Issuer::new(self.params.clone(), &self.key);
        let key = KeyPair::generate()?;
        let mut leaf = CertificateParams::new(hosts.to_vec())?;
        leaf.distinguished_name.push(
            DnType::CommonName,
            hosts.first().cloned().unwrap_or_else(|| "nac".into()),
        );
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let (nb, na) = validity(days);
        leaf.not_before = nb.into();
        leaf.not_after = na.into();
        let cert = leaf.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

fn validity(days: u32) -> (std::time::SystemTime, std::time::SystemTime) {
    // Backdate a little so clock skew between machines does not make a fresh certificate "not yet valid".
    let nb = std::time::SystemTime::now() - std::time::Duration::from_secs(300);
    (nb, nb + std::time::Duration::from_secs(u64::from(days) * 86_400))
}
