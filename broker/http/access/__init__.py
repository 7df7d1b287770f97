"""Who an HTTP request comes from and what it may do: authentication (401) and the route table of access (403).

`authentication.py` identifies the caller (HTTP Basic checked by `basic_credentials.py`, bearer tokens by
`bearer_tokens.py`, a TLS client certificate); `route_access.py` authorizes each route with the ACLs the
Kafka listeners use, in the app's `security_middleware`.
"""
