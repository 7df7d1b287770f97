"""Kelp's security core (`kelp.security`): who a client is, how it proves it, and what it may do.

Pure building blocks with Kafka's semantics (issue 20). They belong to the shared `kelp` root, not to
`kelp.broker` (issue 35): the brokers' listeners authenticate and authorize with them, and the operator builds
KelpUsers' ACLs and SCRAM credentials and maps certificate names with the very same rules, importing nothing of
the broker.

- `principal`: `KafkaPrincipal` (`User:alice`), Kafka's `ssl.principal.mapping.rules`, and a client
  certificate's subject rendered as Java's `X500Principal.getName()` renders it.
- `sasl`: what every SASL mechanism server shares (the outcome, the error a client may see, Kafka's
  frame size bound, KIP-368 session lifetime).
- `plain`: SASL/PLAIN messages and the broker's user table from `sasl.jaas.config`.
- `jaas`: Kafka's JAAS config parser (`sasl.jaas.config`), for every login module.
- `scram`: SCRAM-SHA-256/512 credentials (never a password), the server exchange, a client.
- `oauthbearer`: the RFC 7628 client message and JWT validation against static keys or a JWKS file.
- `acl`: Kafka's ACL model and an `Authorizer` with StandardAuthorizer's decisions, indexed and cached.
- `tls`: `ssl.SSLContext`s from Kafka's PEM keys, and a reloader for rotated certificate files.

Layer rule (checked by tests/layout): nothing here imports networking (only `tls` uses the standard
library's `ssl`) or anything above it (the Kafka and HTTP listeners, the cluster layer, the app). The
connection layer asks these modules; they never reach back. Only `tls` (certificate files) and the
file loaders of `oauthbearer` (a JWKS or PEM file, when called) do I/O; nothing here logs a password,
a salted password, a private key or a bearer token.
"""
