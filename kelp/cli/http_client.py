"""A small blocking client for the broker's admin HTTP API.

Why: `kelp topics ...` needs a handful of JSON calls; the standard library's
urllib keeps the CLI free of an event loop. A broker's JSON error body
(`{"error_code", "message"}`) becomes a `CliError` carrying its message; a
401 or 403 also says how to give credentials. `HttpSecurity` (made from the
client properties by client_config.py) is the TLS context for `https://`
(the CA to trust, a client certificate) and the Authorization header.

It must never hide the broker's message behind a generic one.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from .endpoints import CONNECT_TIMEOUT_S, DEFAULT_HTTP, default_http_url, split_address, wait_reachable
from .errors import CliError

# DEFAULT_HTTP and default_http_url are endpoints.py's, named here too for the commands that build a client.
__all__ = ["AdminClient", "HttpSecurity", "DEFAULT_HTTP", "default_http_url"]

_CREDENTIALS_HINT = ("give credentials with --command-config FILE (Kafka client properties), --sasl-username and "
                     "--sasl-password / KELP_SASL_PASSWORD, or a JWT with --bearer-token-file / KELP_BEARER_TOKEN")


@dataclass(frozen=True)
class HttpSecurity:
    """What a request to a broker carries: the TLS context for `https://` (None: the system's CAs) and an
    Authorization header (None: no credentials)."""

    ssl_context: ssl.SSLContext | None = None
    authorization: str | None = None


class AdminClient:
    def __init__(self, base_url: str, *, timeout_s: float = 30.0, connect_timeout_s: float | None = None,
                 security: HttpSecurity | None = None) -> None:
        if "://" not in base_url:
            base_url = "http://" + base_url
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.security = security or HttpSecurity()
        self._reached = False

    @property
    def scheme(self) -> str:
        return urllib.parse.urlsplit(self.base_url).scheme

    def sibling(self, base_url: str) -> AdminClient:
        """A client for another broker's HTTP API with this one's timeouts, TLS and credentials."""
        return AdminClient(base_url, timeout_s=self.timeout_s, connect_timeout_s=self.connect_timeout_s,
                           security=self.security)

    def _check_reachable(self) -> None:
        """Once per client: fail within the connect timeout, naming the address, if nothing listens there."""
        parts = urllib.parse.urlsplit(self.base_url)
        default_port = 443 if parts.scheme == "https" else 80
        address = split_address(parts.netloc.rpartition("@")[2], default_port=default_port)
        timeout = CONNECT_TIMEOUT_S if self.connect_timeout_s is None else self.connect_timeout_s
        wait_reachable([address], what="the Kelp HTTP API", hint="set --http or KELP_HTTP", timeout_s=timeout,
                       shown=self.base_url)
        self._reached = True

    def request(self, method: str, path: str, body: Any = None) -> Any:
        if not self._reached:
            self._check_reachable()
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        if self.security.authorization is not None:
            req.add_header("Authorization", self.security.authorization)
        context = self.security.ssl_context if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=context) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                message = json.loads(raw)["message"]
            except Exception:
                message = raw.decode("utf-8", "replace").strip()[:300] or exc.reason
            hint = ""
            if exc.code == 401:
                hint = f"; {_CREDENTIALS_HINT}" if self.security.authorization is None else "; check the credentials"
            elif exc.code == 403:
                hint = "; the principal needs an ACL for this (kelp acls add), or to be a super user"
            raise CliError(f"{message} (HTTP {exc.code} from {method} {url}{hint})") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            hint = "set --http or KELP_HTTP"
            if isinstance(reason, ssl.SSLError):
                hint = "trust the broker's CA with --ssl-ca or ssl.truststore.location in --command-config"
            raise CliError(f"cannot reach the Kelp HTTP API at {self.base_url}: {reason} ({hint})") from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise CliError(f"{method} {url} answered with something that is not JSON: {raw[:200]!r}") from None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)


def quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")
