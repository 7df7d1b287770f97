"""TLS for Kelp's listeners and clients from Kafka's PEM settings, and certificates re-read when their files change.

Why: a Kafka user configures TLS with `ssl.*` keys (PEM keystores since KIP-651), and cert-manager or
Kelp's operator rotate the files under a running broker. This module turns Kafka's settings into
`ssl.SSLContext`s and keeps them current:

- `TlsSettings.from_kafka_config`: `ssl.keystore.type=PEM` (JKS and PKCS12 are refused with an error
  saying so), `ssl.keystore.location` (a PEM file with the certificate chain and the private key),
  `ssl.key.password` (for an encrypted key), `ssl.truststore.type=PEM`, `ssl.truststore.location` (a PEM CA
  bundle), `ssl.client.auth=none|requested|required`, `ssl.enabled.protocols` (TLSv1.2 and TLSv1.3 only:
  TLS 1.2 is the floor), `ssl.cipher.suites` (Java/IANA names as Kafka takes them, or OpenSSL names),
  `ssl.endpoint.identification.algorithm` (`https`: clients check the broker's host name; empty: they
  do not), each overridable per listener by `listener.name.<listener>.ssl.*` as Kafka does.
- `server_context` / `client_context`: contexts with those settings. A server without a client truststore
  cannot ask for client certificates (refused: Python has no JVM default truststore to fall back on); a
  client without one trusts the system CAs, as a JVM client trusts its default store. Python cannot choose
  TLS 1.3 suites, so `ssl.cipher.suites` restricts TLS 1.2 only; TLS 1.3 uses OpenSSL's (all AEAD).
- `TlsReloader`: re-reads the keystore, key and truststore files at most every `check_interval_s` (or on
  `reload_now()`), looking at each file's mtime, size and inode first and its content hash second, and
  loads a changed keystore into the SAME context with `load_cert_chain`, which every later handshake uses
  (an asyncio server keeps its context object; OpenSSL copies the certificate into each new connection).
  New material is first loaded into a scratch context from private in-memory copies of the bytes that were
  read (memfd, or a 0600 file in a private directory elsewhere), and only then into the live context from
  the same copies, so a half-written file (a rotation in progress) or a key that does not match its
  certificate leaves the live context untouched; that failure is logged once per distinct content.
  A changed truststore is added to the context (OpenSSL's store only grows): new CAs are trusted at once,
  while a CA removed from the file stays trusted until restart, which is logged.

This module must never log a private key or its password, leave key material in a file it made, or do any
I/O but reading the configured files (and those private copies).
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import logging
import os
import ssl
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kelp.clock import Monotonic, monotonic
from kelp.errors import ConfigError

__all__ = [
    "ClientAuth",
    "TlsConfigError",
    "TlsReloader",
    "TlsSettings",
    "client_context",
    "server_context",
]

log = logging.getLogger(__name__)

PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_TOO_OLD = {"TLSv1", "TLSv1.1", "SSLv3", "SSLv2", "SSLv2Hello"}
# Java/IANA names of the TLS 1.2 suites OpenSSL offers with AES or ChaCha20, as `openssl ciphers -stdname` maps
# them; OpenSSL names are accepted as they are.
CIPHER_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
}
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                          "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})


class TlsConfigError(ConfigError):
    """TLS settings or files Kelp cannot use; the message names the key or file and what to change."""


class ClientAuth(enum.Enum):
    """`ssl.client.auth`."""

    NONE = "none"
    REQUESTED = "requested"
    REQUIRED = "required"


@dataclass(frozen=True)
class TlsSettings:
    """One listener's (or client's) TLS settings, with Kafka's defaults. Paths name PEM files."""

    keystore_location: str | None = None
    """ssl.keystore.location: certificate chain and private key (PEM)."""
    key_location: str | None = None
    """The private key in a file of its own (cert-manager's `tls.key`); None: it is in the keystore file."""
    key_password: str | None = field(default=None, repr=False)
    """ssl.key.password: for an encrypted private key."""
    truststore_location: str | None = None
    """ssl.truststore.location: CA certificates (PEM) that verify the peer."""
    client_auth: ClientAuth = ClientAuth.NONE
    """ssl.client.auth (servers only)."""
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    """ssl.enabled.protocols."""
    cipher_suites: tuple[str, ...] = ()
    """ssl.cipher.suites (empty: OpenSSL's defaults)."""
    endpoint_identification_algorithm: str = "https"
    """ssl.endpoint.identification.algorithm (clients only): `https` checks the server's host name."""

    @classmethod
    def from_kafka_config(cls, config: Mapping[str, str], *, listener: str | None = None) -> TlsSettings:
        """Kafka's `ssl.*` keys; with `listener`, each `listener.name.<listener>.ssl.*` key overrides its base."""

        def get(key: str) -> str | None:
            if listener is not None:
                scoped = config.get(f"listener.name.{listener.lower()}.{key}")
                if scoped is not None:
                    return scoped
            return config.get(key)

        for kind in ("keystore", "truststore"):
            store_type = get(f"ssl.{kind}.type")
            if store_type is not None and store_type.strip().upper() != "PEM":
                raise TlsConfigError(f"ssl.{kind}.type={store_type}: Kelp reads PEM files only; set ssl.{kind}.type="
                                     f"PEM and convert the store (e.g. openssl pkcs12 -in store.p12 -nodes)")
        protocol = get("ssl.protocol")
        if protocol is not None and protocol.strip() not in ("TLS", "TLSv1.2", "TLSv1.3"):
            raise TlsConfigError(f"ssl.protocol={protocol}: Kelp speaks TLSv1.2 and TLSv1.3 only")
        algorithm = get("ssl.endpoint.identification.algorithm")
        client_auth = (get("ssl.client.auth") or "none").strip().lower()
        try:
            auth = ClientAuth(client_auth)
        except ValueError:
            raise TlsConfigError(f"ssl.client.auth={client_auth}: expected none, requested or required") from None
        return cls(
            keystore_location=_blank_none(get("ssl.keystore.location")),
            key_password=get("ssl.key.password"),
            truststore_location=_blank_none(get("ssl.truststore.location")),
            client_auth=auth,
            enabled_protocols=_list(get("ssl.enabled.protocols")) or ("TLSv1.2", "TLSv1.3"),
            cipher_suites=_list(get("ssl.cipher.suites")),
            endpoint_identification_algorithm="https" if algorithm is None else algorithm.strip(),
        )


def _blank_none(value: str | None) -> str | None:
    return value.strip() if value and value.strip() else None


def _list(value: str | None) -> tuple[str, ...]:
    return tuple(item.strip() for item in (value or "").split(",") if item.strip())


def _protocol_bounds(settings: TlsSettings) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    versions: list[ssl.TLSVersion] = []
    for name in settings.enabled_protocols:
        if name in _TOO_OLD:
            raise TlsConfigError(f"ssl.enabled.protocols lists {name}: Kelp's minimum is TLSv1.2; remove it")
        if name not in PROTOCOLS:
            raise TlsConfigError(f"ssl.enabled.protocols lists {name!r}: expected TLSv1.2 and/or TLSv1.3")
        versions.append(PROTOCOLS[name])
    if not versions:
        raise TlsConfigError("ssl.enabled.protocols is empty: enable TLSv1.2 and/or TLSv1.3")
    return min(versions), max(versions)


def _openssl_ciphers(settings: TlsSettings, tls12_enabled: bool) -> str | None:
    if not settings.cipher_suites:
        return None
    tls12: list[str] = []
    for name in settings.cipher_suites:
        if name in TLS13_SUITES:
            continue
        if name.startswith(("TLS_", "SSL_")):
            if name not in CIPHER_SUITES:
                raise TlsConfigError(f"ssl.cipher.suites lists {name}, which Kelp does not offer; choose from "
                                     f"{', '.join(sorted(CIPHER_SUITES))}")
            tls12.append(CIPHER_SUITES[name])
        else:
            tls12.append(name)
    if not tls12:
        if tls12_enabled:
            raise TlsConfigError("ssl.cipher.suites lists no TLS 1.2 suite while TLSv1.2 is enabled; add one or set "
                                 "ssl.enabled.protocols=TLSv1.3")
        return None
    return ":".join(tls12)


def _configure(context: ssl.SSLContext, settings: TlsSettings) -> None:
    low, high = _protocol_bounds(settings)
    context.minimum_version = low
    context.maximum_version = high
    ciphers = _openssl_ciphers(settings, low <= ssl.TLSVersion.TLSv1_2)
    if ciphers is not None:
        try:
            context.set_ciphers(ciphers)
        except ssl.SSLError:
            raise TlsConfigError(f"ssl.cipher.suites: OpenSSL accepts none of {ciphers}") from None
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION


# --- reading the files ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _FileState:
    path: str
    signature: tuple[int, int, int, int]  # mtime_ns, size, inode, device
    digest: str
    data: bytes = field(repr=False)


def _read(path: str, what: str) -> _FileState:
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            data = handle.read()
    except OSError as exc:
        raise TlsConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    return _FileState(path, _signature(info), hashlib.sha256(data).hexdigest(), data)


def _signature(info: os.stat_result) -> tuple[int, int, int, int]:
    return info.st_mtime_ns, info.st_size, info.st_ino, info.st_dev


def _stat(path: str) -> tuple[int, int, int, int] | None:
    try:
        return _signature(os.stat(path))
    except OSError:
        return None


@contextlib.contextmanager
def _private_copy(data: bytes) -> Iterator[str]:
    """A path OpenSSL can open that holds `data` and nothing else can read: a memfd where Linux has one, else
    a 0600 file in a private temporary directory; gone when the block ends."""
    if hasattr(os, "memfd_create") and Path("/proc/self/fd").is_dir():
        fd = os.memfd_create("kelp-tls", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    import tempfile  # only without memfd_create; with shutil and the compressors it pulls, 0.7 MiB (issue 38)

    directory = tempfile.mkdtemp(prefix="kelp-tls-")
    path = os.path.join(directory, "material.pem")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _password(settings: TlsSettings) -> str | Callable[[], str]:
    if settings.key_password is not None:
        return settings.key_password

    def missing() -> str:  # never let OpenSSL prompt on a terminal for a password
        raise TlsConfigError(f"the private key in {settings.key_location or settings.keystore_location} is "
                             "encrypted: set ssl.key.password")

    return missing


def _load_keystore(context: ssl.SSLContext, chain: _FileState, key: _FileState | None, settings: TlsSettings) -> None:
    with _private_copy(chain.data) as chain_path, contextlib.ExitStack() as stack:
        key_path = stack.enter_context(_private_copy(key.data)) if key is not None else None
        try:
            context.load_cert_chain(chain_path, key_path, _password(settings))
        except ssl.SSLError as exc:
            where = chain.path if key is None else f"{chain.path} and {key.path}"
            raise TlsConfigError(f"cannot load the certificate chain and private key from {where}: {exc.reason or exc}"
                                 " (a PEM certificate chain and its matching key, and ssl.key.password if the key"
                                 " is encrypted)") from None


def _ca_certificates(trust: _FileState) -> frozenset[bytes]:
    scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    text = trust.data.decode("ascii", errors="replace")
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise TlsConfigError(f"{trust.path} holds no PEM certificate (ssl.truststore.location)")
    try:
        scratch.load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsConfigError(f"cannot load the CA certificates in {trust.path}: {exc}") from None
    return frozenset(ssl.PEM_cert_to_DER_cert(block) for block in _pem_blocks(text))


def _pem_blocks(text: str) -> list[str]:
    blocks: list[str] = []
    start = text.find("-----BEGIN CERTIFICATE-----")
    while start >= 0:
        end = text.find("-----END CERTIFICATE-----", start)
        if end < 0:
            break
        end += len("-----END CERTIFICATE-----")
        blocks.append(text[start:end])
        start = text.find("-----BEGIN CERTIFICATE-----", end)
    return blocks


def _describe_leaf(chain: _FileState) -> str:
    try:
        from cryptography import x509

        leaf = x509.load_pem_x509_certificate(chain.data)
        return f"{leaf.subject.rfc4514_string()}, valid until {leaf.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    except ValueError:
        return "certificate"


# --- contexts and the reloader ----------------------------------------------------------------------------

class TlsReloader:
    """A context built from `settings` and kept current with its files (see the module docstring).

    `maybe_reload()` is cheap to call often (it returns at once inside `check_interval_s`); the owner calls it
    on a timer or before accepting connections. Both return whether new material was loaded.
    """

    def __init__(self, context: ssl.SSLContext, settings: TlsSettings, *, check_interval_s: float = 60.0,
                 monotonic: Monotonic = monotonic) -> None:
        self.context = context
        self.settings = settings
        self._check_interval_s = check_interval_s
        self._monotonic = monotonic
        self._last_check = monotonic()
        self._failed: set[tuple[str, ...]] = set()
        _configure(context, settings)
        self._chain = _read(settings.keystore_location, "ssl.keystore.location") if settings.keystore_location else None
        self._key = _read(settings.key_location, "the private key file") if settings.key_location else None
        if self._key is not None and self._chain is None:
            raise TlsConfigError("a private key file without ssl.keystore.location: set the certificate chain too")
        self._trust = (_read(settings.truststore_location, "ssl.truststore.location")
                       if settings.truststore_location else None)
        self._trusted: frozenset[bytes] = frozenset()
        if self._chain is not None:
            _load_keystore(context, self._chain, self._key, settings)
        if self._trust is not None:
            self._trusted = _ca_certificates(self._trust)
            context.load_verify_locations(cadata=self._trust.data.decode("ascii", errors="replace"))

    @classmethod
    def server(cls, settings: TlsSettings, *, check_interval_s: float = 60.0,
               monotonic: Monotonic = monotonic) -> TlsReloader:
        if settings.keystore_location is None:
            raise TlsConfigError("a TLS listener needs ssl.keystore.location (its certificate chain and key, PEM)")
        if settings.client_auth is not ClientAuth.NONE and settings.truststore_location is None:
            raise TlsConfigError(f"ssl.client.auth={settings.client_auth.value} needs ssl.truststore.location: the CA "
                                 "certificates that signed the clients' certificates (PEM)")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.verify_mode = {ClientAuth.NONE: ssl.CERT_NONE, ClientAuth.REQUESTED: ssl.CERT_OPTIONAL,
                               ClientAuth.REQUIRED: ssl.CERT_REQUIRED}[settings.client_auth]
        return cls(context, settings, check_interval_s=check_interval_s, monotonic=monotonic)

    @classmethod
    def client(cls, settings: TlsSettings, *, check_interval_s: float = 60.0,
               monotonic: Monotonic = monotonic) -> TlsReloader:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = settings.endpoint_identification_algorithm.lower() == "https"
        context.verify_mode = ssl.CERT_REQUIRED
        if settings.truststore_location is None:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        return cls(context, settings, check_interval_s=check_interval_s, monotonic=monotonic)

    def maybe_reload(self) -> bool:
        now = self._monotonic()
        if now - self._last_check < self._check_interval_s:
            return False
        self._last_check = now
        return self._reload(force=False)

    def reload_now(self) -> bool:
        self._last_check = self._monotonic()
        return self._reload(force=True)

    def _reload(self, *, force: bool) -> bool:
        watched = [s for s in (self._chain, self._key, self._trust) if s is not None]
        if not force and all(_stat(s.path) == s.signature for s in watched):
            return False
        try:
            chain = _read(self._chain.path, "ssl.keystore.location") if self._chain else None
            key = _read(self._key.path, "the private key file") if self._key else None
            trust = _read(self._trust.path, "ssl.truststore.location") if self._trust else None
        except TlsConfigError as exc:
            self._log_failure(("unreadable", str(exc)), str(exc))
            return False
        changed_keystore = (chain is not None and self._chain is not None and chain.digest != self._chain.digest
                            or key is not None and self._key is not None and key.digest != self._key.digest)
        changed_trust = trust is not None and self._trust is not None and trust.digest != self._trust.digest
        fingerprint = tuple(s.digest for s in (chain, key, trust) if s is not None)
        if not changed_keystore and not changed_trust:
            self._chain, self._key, self._trust = chain, key, trust  # touched, same content: remember the stat
            return False
        if fingerprint in self._failed:
            return False
        try:
            trusted = _ca_certificates(trust) if changed_trust and trust is not None else self._trusted
            if changed_keystore and chain is not None:
                _load_keystore(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), chain, key, self.settings)  # scratch first
                _load_keystore(self.context, chain, key, self.settings)
        except TlsConfigError as exc:
            self._log_failure(fingerprint, f"{exc}; the current certificates stay in use")
            return False
        if changed_trust and trust is not None:
            self.context.load_verify_locations(cadata=trust.data.decode("ascii", errors="replace"))
            removed = self._trusted - trusted
            if removed:
                log.warning("%d CA certificate(s) removed from %s stay trusted until the process restarts",
                            len(removed), trust.path)
            self._trusted = self._trusted | trusted
            log.info("TLS truststore %s reloaded (%d CA certificates)", trust.path, len(trusted))
        if changed_keystore and chain is not None:
            log.info("TLS certificate reloaded from %s: %s", chain.path, _describe_leaf(chain))
        self._chain, self._key, self._trust = chain, key, trust
        return True

    def _log_failure(self, fingerprint: tuple[str, ...], message: str) -> None:
        if fingerprint not in self._failed:
            self._failed.add(fingerprint)
            log.warning("TLS reload failed: %s", message)


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server context for `settings` (use `TlsReloader.server` to keep it current)."""
    return TlsReloader.server(settings).context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client context for `settings` (use `TlsReloader.client` to keep it current)."""
    return TlsReloader.client(settings).context
