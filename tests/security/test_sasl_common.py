"""What every SASL mechanism shares: the message a client may see, and KIP-368's session lifetime.

The generic message and the lifetime rules are Kafka's SaslServerAuthenticator (handleSaslToken and
ReauthInfo.calcCompletionTimesAndReturnSessionLifetimeMs).
"""

from __future__ import annotations

import pytest

from kelp.errors import ErrorCode
from kelp.security.sasl import SaslAuthenticationError, session_lifetime_ms


def test_private_failures_get_kafkas_generic_message() -> None:
    error = SaslAuthenticationError("user bob does not exist")
    assert error.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert error.client_message("SCRAM-SHA-512") == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512")
    assert "re-authentication" in error.client_message("PLAIN", reauthenticating=True)


def test_public_failures_carry_their_own_message() -> None:
    error = SaslAuthenticationError("Authentication failed: Invalid username or password", public=True)
    assert error.client_message("PLAIN") == "Authentication failed: Invalid username or password"


@pytest.mark.parametrize(("expiry", "max_reauth", "lifetime"), [
    (None, None, 0),            # neither: no re-authentication
    (None, 0, 0),               # connections.max.reauth.ms=0 is unset
    (None, 60_000, 60_000),     # only the broker's bound
    (1_030_000, None, 30_000),  # only the credential's expiry
    (1_030_000, 60_000, 30_000),
    (1_090_000, 60_000, 60_000),
    (999_000, 60_000, 0),       # already expired: never negative
])
def test_session_lifetime(expiry: int | None, max_reauth: int | None, lifetime: int) -> None:
    assert session_lifetime_ms(credential_expiry_ms=expiry, max_reauth_ms=max_reauth, now_ms=1_000_000) == lifetime
