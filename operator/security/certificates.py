"""X.509 for the operator's own CAs: keys, CA certificates, leaf certificates, and reading them back.

Why: with no `spec.tls.issuerRef` the operator is the Certificate Authority of each secured Cluster
(Strimzi's cluster and clients CAs), so it must mint certificates every TLS stack Kelp meets accepts —
Python's `ssl` (OpenSSL), Java's Kafka clients and tools, librdkafka — and read back what it minted to
decide renewals (`pki.py`). `cryptography` does the work; this module fixes the choices:

- ECDSA P-256 keys (fast to generate and to handshake; every client above speaks it), SHA-256 signatures,
  private keys as unencrypted PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`: what Kafka's PEM keystore and
  Python's `load_cert_chain` read);
- CA certificates: `basicConstraints CA:TRUE, pathlen:0` and `keyUsage keyCertSign, cRLSign` (critical),
  subject `CN=<cluster>-<kind>-ca v<generation>,O=kelp.dev` (the generation is read back from it);
- leaf certificates: `basicConstraints CA:FALSE`, `keyUsage digitalSignature` (critical), the extended key
  usages asked for (serverAuth and/or clientAuth), subject alternative names, subject and authority key
  identifiers; `notBefore` five minutes in the past (a broker whose clock is a little behind the operator's
  must not see a certificate from the future), `notAfter` never past the issuing CA's.

Time comes in as wall-clock milliseconds (kelp.clock); randomness (keys, serial numbers) is the only other
input. Pure apart from that: no file, no network.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["KeyPair", "CertInfo", "new_key", "make_ca", "make_leaf", "read_cert", "read_certs", "issued_by",
           "key_matches", "pem_blocks", "BACKDATE_MS", "DAY_MS", "SERVER_AND_CLIENT", "CLIENT_ONLY"]

DAY_MS = 86_400_000
BACKDATE_MS = 5 * 60_000
SERVER_AND_CLIENT = ("serverAuth", "clientAuth")
CLIENT_ONLY = ("clientAuth",)
_EKU = {"serverAuth": ExtendedKeyUsageOID.SERVER_AUTH, "clientAuth": ExtendedKeyUsageOID.CLIENT_AUTH}
_GENERATION = re.compile(r" v(\d+)$")
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n?", re.S)


@dataclass(frozen=True)
class KeyPair:
    """A private key and its certificate, both PEM."""

    key_pem: bytes
    cert_pem: bytes


@dataclass(frozen=True)
class CertInfo:
    """What the operator reads back from a certificate to decide on it."""

    pem: bytes
    subject: str  # RFC 4514 as `cryptography` renders it (CN=...,O=...)
    not_before_ms: int
    not_after_ms: int
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    is_ca: bool

    @property
    def generation(self) -> int | None:
        """A CA's generation, from its common name (`... v3`)."""
        found = _GENERATION.search(self.subject.split(",")[0])
        return int(found.group(1)) if found else None


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


def _ms(when: datetime.datetime) -> int:
    return int(when.timestamp() * 1000)


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the operator's CA keys are ECDSA keys; this one is not")
    return key


def _name(common_name: str, organization: str | None) -> x509.Name:
    # X.509 order O then CN, which Java's RFC 2253 rendering (Kafka's principals) reverses to `CN=...,O=...`.
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(*, common_name: str, organization: str, now_ms: int, validity_days: int) -> KeyPair:
    """A self-signed CA certificate with a new key, valid from now (minus BACKDATE_MS) for `validity_days`."""
    key = new_key()
    name = _name(common_name, organization)
    public = key.public_key()
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(_time(now_ms - BACKDATE_MS))
            .not_valid_after(_time(now_ms + validity_days * DAY_MS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(key, hashes.SHA256()))
    return KeyPair(_key_pem(key), cert.public_bytes(serialization.Encoding.PEM))


def make_leaf(ca: KeyPair, *, common_name: str, organization: str | None, dns_names: tuple[str, ...] = (),
              ip_addresses: tuple[str, ...] = (), usages: tuple[str, ...], now_ms: int,
              validity_days: int) -> KeyPair:
    """A certificate with a new key signed by `ca`, valid for `validity_days` but never past the CA's own end."""
    ca_key = _load_key(ca.key_pem)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    key = new_key()
    public = key.public_key()
    not_after = min(now_ms + validity_days * DAY_MS, _ms(ca_cert.not_valid_after_utc))
    builder = (x509.CertificateBuilder()
               .subject_name(_name(common_name, organization)).issuer_name(ca_cert.subject).public_key(public)
               .serial_number(x509.random_serial_number())
               .not_valid_before(_time(now_ms - BACKDATE_MS))
               .not_valid_after(_time(not_after))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                            crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage([_EKU[u] for u in usages]), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(_key_pem(key), cert.public_bytes(serialization.Encoding.PEM))


def read_cert(pem: bytes) -> CertInfo:
    """The facts of one PEM certificate; ValueError when it is not one."""
    cert = x509.load_pem_x509_certificate(pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = tuple(san.get_values_for_type(x509.DNSName))
        ips = tuple(str(a) for a in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        dns, ips = (), ()
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    return CertInfo(pem=cert.public_bytes(serialization.Encoding.PEM), subject=cert.subject.rfc4514_string(),
                    not_before_ms=_ms(cert.not_valid_before_utc), not_after_ms=_ms(cert.not_valid_after_utc),
                    dns_names=dns, ip_addresses=ips, is_ca=is_ca)


def pem_blocks(bundle: bytes) -> list[bytes]:
    """The PEM certificates of a bundle, in order."""
    return [m.group(0).rstrip(b"\n") + b"\n" for m in _PEM.finditer(bundle)]


def read_certs(bundle: bytes) -> list[CertInfo]:
    return [read_cert(block) for block in pem_blocks(bundle)]


def issued_by(leaf_pem: bytes, ca_pem: bytes) -> bool:
    """Whether `leaf_pem` was signed by the key of `ca_pem` (and names it as issuer)."""
    try:
        x509.load_pem_x509_certificate(leaf_pem).verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def key_matches(key_pem: bytes, cert_pem: bytes) -> bool:
    """Whether the private key belongs to the certificate."""
    try:
        key = _load_key(key_pem)
        public = x509.load_pem_x509_certificate(cert_pem).public_key()
    except (ValueError, TypeError):
        return False
    return (isinstance(public, ec.EllipticCurvePublicKey)
            and public.public_numbers() == key.public_key().public_numbers())
