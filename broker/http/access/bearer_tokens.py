"""HTTP bearer tokens (`http.authentication.methods=bearer`) checked as a Kafka listener checks OAUTHBEARER tokens.

Why: a client holding a JWT from the identity provider authenticates to the Kafka listeners with SASL/OAUTHBEARER;
the same token must open the HTTP API (`Authorization: Bearer <JWT>`), with the same rules, not a second set of
keys and claims to keep in step. So HTTP uses the OAUTHBEARER validator of one Kafka listener: the one
`http.authentication.oauthbearer.listener` names, else the first listener (in `listeners` order) enabling
OAUTHBEARER. Its `sasl.oauthbearer.*` settings (resolved per listener and mechanism, as for the listener itself)
give the keys (`jwks.endpoint.url=file:...`, `public.key.location`), the expected audience and issuer, the clock
skew and the subject claim; the principal is `User:<subject>`, as after SASL/OAUTHBEARER on that listener.

A token that does not validate (expired, wrong signature, `alg: none`, an unknown key, a bad claim) raises
`BearerRefused` with the validator's reason, which the authenticator answers 401 with that reason in JSON.
A named listener that does not exist or does not enable OAUTHBEARER stops the broker at start.

This module must never log or keep a token.
"""

from __future__ import annotations

from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError
from kelp.security.oauthbearer import JwtValidator, OAuthBearerError
from kelp.security.principal import KafkaPrincipal

from .authentication import BearerCheck, BearerRefused

__all__ = ["bearer_check", "bearer_listener", "LISTENER_KEY"]

LISTENER_KEY = "http.authentication.oauthbearer.listener"
MECHANISM = "OAUTHBEARER"


def bearer_listener(config: BrokerConfig) -> str | None:
    """The name of the listener whose OAUTHBEARER validator checks HTTP bearer tokens (None: no listener has one)."""
    listeners = config.listener_setup.listeners
    named = str(config.get(LISTENER_KEY) or "").strip().upper()
    if named:
        found = next((listener for listener in listeners if listener.name == named), None)
        if found is None:
            raise ConfigError(f"broker config '{LISTENER_KEY}'={named}: no such listener (listeners: "
                              f"{', '.join(listener.name for listener in listeners)})")
        if MECHANISM not in found.mechanisms:
            raise ConfigError(f"broker config '{LISTENER_KEY}'={named}: listener {named} does not enable SASL/"
                              f"{MECHANISM}; add it to listener.name.{named.lower()}.sasl.enabled.mechanisms with "
                              "its sasl.oauthbearer.* keys, or name a listener that does")
        return found.name
    return next((listener.name for listener in listeners if MECHANISM in listener.mechanisms), None)


def bearer_check(config: BrokerConfig, validator: JwtValidator | None = None) -> BearerCheck | None:
    """The bearer check of `config` (None when no listener enables OAUTHBEARER); `validator` replaces the
    listener's (tests give one with their own clock)."""
    if validator is None:
        name = bearer_listener(config)
        if name is None:
            return None
        listener = next(listener for listener in config.listener_setup.listeners if listener.name == name)
        validator = JwtValidator.from_kafka_config(listener.mechanisms[MECHANISM].oauth)
    checker = validator

    async def check(token: str) -> KafkaPrincipal:
        if not token:
            raise BearerRefused("the Authorization header carries no token")
        try:
            validated = checker.validate(token)
        except OAuthBearerError as exc:
            raise BearerRefused(exc.detail) from None
        return KafkaPrincipal.user(validated.principal)

    return check
