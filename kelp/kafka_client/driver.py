"""What both Kafka-protocol connections hold besides their socket or stream, declared once.

Why: `BlockingConnection` and `AsyncConnection` are thin drivers over one I/O-free `ClientProtocol`
(`protocol.py`); their settings — where the broker is, the bounds, the security — and the protocol they drive
are the same, so they are set here, not written twice. No I/O happens here: a connection opens on first use.
"""

from __future__ import annotations

from .framing import MAX_RESPONSE_BYTES
from .protocol import ClientProtocol
from .security import PLAINTEXT, ConnectionSecurity

__all__ = ["Driver"]


class Driver:
    """What a connection holds besides its socket or stream — where the broker is, the bounds, the security and
    the protocol — declared once for both drivers: `timeout_s` bounds connecting and each request;
    `security` says whether it speaks TLS and authenticates (plaintext by default)."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float = 30.0,
                 max_response_bytes: int = MAX_RESPONSE_BYTES, security: ConnectionSecurity = PLAINTEXT) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self.protocol = ClientProtocol(address=self.address, client_id=client_id,
                                       max_response_bytes=max_response_bytes)
        self._init_io()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _init_io(self) -> None:
        """The driver's own state (its lock; no socket is opened here), set up last by `__init__`."""
