"""The one place the broker talks to the Kubernetes API: a client and a JSON request helper.

Why: the Lease and ConfigMap backends need four verbs on two resource kinds,
with `resourceVersion` preconditions and exact JSON bodies.
`kubernetes==37.0.2`'s typed models mangle Lease MicroTime values whose
microseconds are 0 (the API server then answers 400), so bodies go to the
server as JSON dicts through `ApiClient.call_api`, and come back as dicts.
The client is synchronous: callers run `request` in a worker thread, never
on the event loop. `kubernetes` is imported lazily, so a broker on the file
backend never loads it.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["api_client_from", "request", "KubeApiError"]


class KubeApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API answered {status}: {message}")
        self.status = status


def api_client_from(*, kubeconfig: str | None = None, host: str | None = None, token: str | None = None,
                    ca_file: str | None = None) -> Any:
    """An ApiClient: explicit host/token/CA, else a kubeconfig file, else the pod's service account."""
    from kubernetes import client, config

    if host:
        cfg = client.Configuration()
        cfg.host = host
        if token:
            cfg.api_key = {"authorization": token}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        if ca_file:
            cfg.ssl_ca_cert = ca_file
        return client.ApiClient(cfg)
    if kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return config.new_client_from_config(config_file=kubeconfig or None)
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)


def request(api: Any, method: str, path: str, *, body: Any = None, query: list[tuple[str, str]] | None = None,
            timeout_s: float = 10.0, content_type: str = "application/json") -> dict:
    """One API call with a JSON body; returns the decoded answer or raises KubeApiError (status, message).

    `content_type` selects the patch flavour for PATCH (for example
    `application/apply-patch+yaml` for server-side apply; JSON is YAML).
    """
    from kubernetes.client.exceptions import ApiException

    params = api.param_serialize(
        method, path, query_params=query or [],
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body, auth_settings=["BearerToken"],
    )
    try:
        resp = api.call_api(*params, _request_timeout=timeout_s)
        raw = resp.read()
    except ApiException as exc:
        try:
            message = json.loads(exc.body or b"{}").get("message") or exc.reason
        except ValueError:
            message = str(exc.body)[:300]
        raise KubeApiError(int(exc.status or 0), str(message)) from None
    if resp.status >= 300:
        raise KubeApiError(resp.status, raw.decode("utf-8", "replace")[:300])
    return json.loads(raw) if raw else {}
