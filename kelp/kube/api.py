"""The one place Kelp talks to the Kubernetes API: a client and a JSON request helper.

Why: the broker's Lease and ConfigMap backends need four verbs on two resource kinds,
with `resourceVersion` preconditions and exact JSON bodies.
`kubernetes==37.0.2`'s typed models mangle Lease MicroTime values whose
microseconds are 0 (the API server then answers 400), so bodies go to the
server as JSON dicts through `ApiClient.call_api`, and come back as dicts.
The client is synchronous: callers run `request` in a worker thread, never
on the event loop. `kubernetes` is imported lazily, so a broker on the file
backend never loads it.

The broker's backends and the operator (`kelp.operator.kube.client`, which
types each kind's answers) both call it: `request` answers free-form JSON
(the operator reads many kinds);
`request_object` and `request_list` answer the Lease, ConfigMap and Node
fields the broker's backends read (`KubeObject`, `KubeList`), every one
optional, as the API server may leave any out.
"""

from __future__ import annotations

import json
import os
from typing import Protocol, TypedDict, cast

from kelp.json_types import JsonObject

__all__ = ["api_client_from", "request", "request_object", "request_list", "KubeApiError", "ApiClient",
           "KubeObject", "KubeList", "ObjectMeta"]


class KubeResponse(Protocol):
    """The raw answer `ApiClient.call_api` returns (urllib3's response, wrapped)."""

    @property
    def status(self) -> int: ...

    def read(self) -> bytes: ...


class ApiClient(Protocol):
    """What Kelp calls on `kubernetes.client.ApiClient`, whose methods carry no types of their own."""

    def param_serialize(self, method: str, resource_path: str, *, query_params: list[tuple[str, str]],
                        header_params: dict[str, str], body: object,
                        auth_settings: list[str]) -> tuple[str, str, dict[str, str], str | None, list[str]]: ...

    def call_api(self, method: str, url: str, header_params: dict[str, str] | None = ..., body: str | None = ...,
                 post_params: list[str] | None = ..., _request_timeout: float | None = ...) -> KubeResponse: ...

    def close(self) -> None: ...


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]


# `continue` is a Python keyword: the functional form.
ListMeta = TypedDict("ListMeta", {"continue": str, "resourceVersion": str}, total=False)


class LeaseSpec(TypedDict, total=False):
    holderIdentity: str
    acquireTime: str  # RFC 3339 with microseconds (MicroTime)
    renewTime: str
    leaseDurationSeconds: int
    leaseTransitions: int


class KubeObject(TypedDict, total=False):
    """The fields of a Lease, ConfigMap or Node that the broker reads or writes."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: LeaseSpec
    data: dict[str, str]


class KubeList(TypedDict, total=False):
    items: list[KubeObject]
    metadata: ListMeta


class KubeApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API answered {status}: {message}")
        self.status = status


def api_client_from(*, kubeconfig: str | None = None, host: str | None = None, token: str | None = None,
                    ca_file: str | None = None) -> ApiClient:
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
        loaded: ApiClient = config.new_client_from_config(config_file=kubeconfig or None)
        return loaded
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)


def request(api: ApiClient, method: str, path: str, *, body: object = None,
            query: list[tuple[str, str]] | None = None, timeout_s: float = 10.0,
            content_type: str = "application/json") -> JsonObject:
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
    doc = json.loads(raw) if raw else {}
    if not isinstance(doc, dict):
        raise KubeApiError(resp.status, f"the answer is not a JSON object: {raw[:300]!r}")
    return doc


def request_object(api: ApiClient, method: str, path: str, *, body: KubeObject | None = None,
                   timeout_s: float = 10.0) -> KubeObject:
    """`request` for one Lease, ConfigMap or Node: the answer taken for the object it names. Its fields are
    checked where they are read (a missing or mistyped one raises KeyError, TypeError or ValueError)."""
    return cast(KubeObject, request(api, method, path, body=body, timeout_s=timeout_s))


def request_list(api: ApiClient, path: str, *, query: list[tuple[str, str]]) -> KubeList:
    """`request` GETting a list of Leases or ConfigMaps, taken for one (see `request_object`)."""
    return cast(KubeList, request(api, "GET", path, query=query))
