"""Certificates and secured listener settings for tests that run real brokers with TLS and SASL.

Why: every security test needs the same few files — a CA, a broker certificate for 127.0.0.1 and
localhost (chain and key in one PEM file, as `ssl.keystore.location` wants it), client certificates with
a subject the principal mapping can read — and the same broker keys. `Pki(tmp_path)` makes them with trustme;
`sasl_ssl_settings`, `ssl_settings` and friends return `--set` settings for a broker's listeners.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path

import trustme

__all__ = ["Pki", "PLAIN_JAAS", "SCRAM_JAAS", "plain_jaas", "scram_jaas"]

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def plain_jaas(users: dict[str, str], *, username: str | None = None, password: str | None = None) -> str:
    """A PlainLoginModule JAAS line with `user_NAME="password"` options (and the broker's own credentials)."""
    own = f' username="{username}" password="{password}"' if username else ""
    return f"{PLAIN_MODULE} required{own} " + " ".join(f'user_{n}="{p}"' for n, p in users.items()) + ";"


def scram_jaas(username: str, password: str) -> str:
    return f'{SCRAM_MODULE} required username="{username}" password="{password}";'


PLAIN_JAAS = plain_jaas({"admin": "admin-secret", "alice": "alice-secret"}, username="admin", password="admin-secret")
SCRAM_JAAS = scram_jaas("admin", "admin-secret")


@dataclass
class Pki:
    """A CA and the certificate files of one test, under `directory`."""

    directory: Path
    ca: trustme.CA = field(default_factory=trustme.CA)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ca_file = self.directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.broker_file = self.server_certificate("broker.pem")

    def server_certificate(self, name: str, *hosts: str) -> Path:
        """A PEM file with a certificate for `hosts` (127.0.0.1 and localhost by default) and its key."""
        leaf = self.ca.issue_cert(*(hosts or ("127.0.0.1", "localhost")), common_name="kelp-broker",
                                  organization_name="Kelp", organization_unit_name="brokers")
        path = self.directory / name
        path.write_bytes(b"".join(b.bytes() for b in leaf.cert_chain_pems) + leaf.private_key_pem.bytes())
        return path

    def client_certificate(self, common_name: str, *, ca: trustme.CA | None = None,
                           not_after: datetime.datetime | None = None) -> tuple[Path, Path]:
        """(certificate chain file, key file) of a client whose subject is CN=<name>,OU=clients,O=Kelp."""
        not_before = None if not_after is None else not_after - datetime.timedelta(days=30)
        leaf = (ca or self.ca).issue_cert(f"{common_name}.clients.kelp.test", common_name=common_name,
                                          organization_name="Kelp", organization_unit_name="clients",
                                          not_before=not_before, not_after=not_after)
        chain = self.directory / f"{common_name}.crt"
        key = self.directory / f"{common_name}.key"
        chain.write_bytes(b"".join(b.bytes() for b in leaf.cert_chain_pems))
        key.write_bytes(leaf.private_key_pem.bytes())
        return chain, key

    def client_keystore(self, common_name: str) -> Path:
        """One PEM file with a client's certificate chain and key (a Java client's ssl.keystore.location)."""
        chain, key = self.client_certificate(common_name)
        path = self.directory / f"{common_name}-keystore.pem"
        path.write_bytes(chain.read_bytes() + key.read_bytes())
        return path
