"""A throwaway CA and broker certificate for the secured bench cases, made at run time in a temporary directory.

Why: Kelp and Apache Kafka must serve TLS with the same certificate and key so their TLS figures differ by
the broker alone. The files are what both read: `ca.pem` (the CA, a client's `ssl.ca.location` and the
brokers' truststore) and `broker.pem` (the broker's certificate and its CA, then its private key as
unencrypted PKCS#8 — the form Kafka's `ssl.keystore.type=PEM` reads without `ssl.key.password`), an RSA
2048 key with 127.0.0.1 and localhost as subject alternative names. Made with `cryptography` (a Kelp
dependency), not trustme (a test dependency, whose keys are not PKCS#8).

It must never write a key outside the directory it is given.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BenchPki", "make_pki"]


@dataclass(frozen=True)
class BenchPki:
    ca_file: Path
    broker_file: Path


def make_pki(directory: Path) -> BenchPki:
    """A CA and a broker certificate for 127.0.0.1/localhost, valid for a day, written under `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Kelp bench"),
                          x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_cert = (x509.CertificateBuilder().subject_name(name("kelp-bench-ca")).issuer_name(name("kelp-bench-ca"))
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(valid[0]).not_valid_after(valid[1])
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (x509.CertificateBuilder().subject_name(name("kelp-bench-broker")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(valid[0]).not_valid_after(valid[1])
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH,
                                                  x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    ca_file, broker_file = directory / "ca.pem", directory / "broker.pem"
    ca_file.write_bytes(ca_cert.public_bytes(pem))
    broker_file.touch(mode=0o600)
    broker_file.write_bytes(cert.public_bytes(pem) + ca_cert.public_bytes(pem) + key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return BenchPki(ca_file, broker_file)
