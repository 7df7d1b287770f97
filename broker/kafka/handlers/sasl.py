"""SaslHandshake (v0-v1) and SaslAuthenticate (v0-v2): the requests a connection authenticates with.

Why inline: these requests change what the connection may send next (after a successful SaslAuthenticate
the client's next request is served, after a failure nothing is), so the server answers them as they
arrive, before it reads the next frame, instead of in a task like every other request (`server.py` calls
`answer_sasl`). The rules are the connection's `Session`'s (`session.py`); this module only turns the
request into a call on it and its answer into Kafka's response. The registrations give ApiVersions the
version ranges and the server the codecs; a handler call outside a connection (a test double) answers
ILLEGAL_SASL_STATE, as a listener without SASL does.
"""

from __future__ import annotations

from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from kelp.errors import ErrorCode

from ..session import SASL_HANDSHAKE, SaslAnswer, Session
from .registry import RequestContext, Response, handles

__all__ = ["answer_sasl"]


def answer_sasl(session: Session, api_key: int, request: object, version: int) -> tuple[Response, SaslAnswer]:
    """The response to a decoded SaslHandshake or SaslAuthenticate on `session`, and the session's answer (whether
    the connection closes after it, and after what delay)."""
    if api_key == SASL_HANDSHAKE:
        assert isinstance(request, SaslHandshakeRequest)
        answer = session.handshake(version, str(request.mechanism or ""))
        return SaslHandshakeResponse(error_code=answer.error_code,
                                     mechanisms=list(session.security.mechanisms)), answer
    assert isinstance(request, SaslAuthenticateRequest)
    answer = session.authenticate(bytes(request.auth_bytes or b""), version=version)
    return SaslAuthenticateResponse(error_code=answer.error_code, error_message=answer.message,
                                    auth_bytes=answer.token, session_lifetime_ms=answer.session_lifetime_ms), answer


@handles(SaslHandshakeRequest, min_version=0, max_version=1)
async def handle_sasl_handshake(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


@handles(SaslAuthenticateRequest, min_version=0, max_version=2)
async def handle_sasl_authenticate(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                    error_message="SaslAuthenticate outside a connection's authentication",
                                    auth_bytes=b"", session_lifetime_ms=0)
