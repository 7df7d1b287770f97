"""Stand-ins for the operator's Kubernetes client and broker admin: objects in dicts, every call recorded.

Why: reconciliation decisions (which topic to create, which Topic resource
wins, when a pod restarts, what a stalled move reports) are tested without
an API server — against a real broker's admin API where the brokers'
behaviour matters, against `FakeAdmin` where the test must script what the
brokers answer (a dead broker, a move that never progresses). The kube
tier tests the real API server separately.
"""

from __future__ import annotations

import asyncio
import copy
import urllib.parse
from typing import Any, Awaitable, Callable, Mapping

from kelp.errors import ErrorCode
from kelp.kube.api import KubeApiError
from kelp.operator.kube.client import CLUSTER_SCOPED, Kind
from kelp.operator.reconcile.brokers import AdminError, BrokerAdmin

# The fields of a StatefulSet spec the API server lets an update change (apps/v1 validation).
STS_MUTABLE = {"replicas", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy",
               "minReadySeconds", "ordinals", "revisionHistoryLimit"}


def _name(kind: str | Kind[Any]) -> str:
    """The operator passes `Kind`s (kube.POD...); tests may name a kind by its string."""
    return kind if isinstance(kind, str) else kind.name


def _key(kind: str, meta: Mapping[str, Any]) -> tuple[str, str, str]:
    return (kind, "" if kind in CLUSTER_SCOPED else meta.get("namespace", "ns"), meta["name"])


def _merge(into: dict, patch: Mapping[str, Any]) -> None:
    """JSON merge patch (RFC 7386): None deletes, objects merge, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


class FakeKube:
    def __init__(self, *objects: dict) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.applied: list[dict] = []
        self.patches: list[tuple[str, str, dict]] = []
        self.deleted: list[tuple[str, str]] = []
        self.listed: dict[str, int] = {}  # kind -> objects returned by list calls (cost of a pass)
        self.fences = 0
        self.guard: Any = None
        self.hooks: dict[tuple[str, str], Callable[..., Awaitable[None]]] = {}
        for obj in objects:
            self.put(obj)

    def put(self, obj: dict) -> None:
        self.objects[_key(obj["kind"], obj["metadata"])] = obj

    def _check(self) -> None:
        if self.guard is not None:
            self.guard.check()

    async def _hook(self, verb: str, kind: str, *args: Any) -> None:
        hook = self.hooks.get((verb, kind))
        if hook is not None:
            await hook(*args)

    async def fence(self) -> None:
        self.fences += 1
        if self.guard is not None:
            await self.guard.fence()

    async def apply(self, manifest: Mapping[str, Any]) -> dict:
        """Like server-side apply: the manifest's fields replace ours, status (the controllers') stays."""
        self._check()
        await self._hook("apply", manifest["kind"], manifest)
        old = self.objects.get(_key(manifest["kind"], manifest["metadata"]))
        if manifest["kind"] == "StatefulSet" and old is not None:
            changed = sorted(k for k in set(manifest["spec"]) | set(old["spec"])
                             if k not in STS_MUTABLE and k in manifest["spec"] and k in old["spec"]
                             and manifest["spec"][k] != old["spec"][k])
            if changed:  # what a real API server answers (fields: {changed})
                raise KubeApiError(422, f'StatefulSet.apps "{manifest["metadata"]["name"]}" is invalid: spec: '
                                        "Forbidden: updates to statefulset spec for fields other than 'replicas', "
                                        "'ordinals', 'template', 'updateStrategy', "
                                        "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden")
        self.applied.append(dict(manifest))
        obj = copy.deepcopy(dict(manifest))
        if old is not None and "status" in old:
            obj["status"] = old["status"]
        self.put(obj)
        return obj

    async def create(self, manifest: Mapping[str, Any]) -> dict | None:
        self._check()
        key = _key(manifest["kind"], manifest["metadata"])
        if key in self.objects:
            return None
        self.put(copy.deepcopy(dict(manifest)))
        return self.objects[key]

    async def get(self, kind: str | Kind[Any], namespace: str, name: str) -> dict | None:
        kind = _name(kind)
        await self._hook("get", kind, namespace, name)
        obj = self.objects.get((kind, "" if kind in CLUSTER_SCOPED else namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    async def list(self, kind: str | Kind[Any], namespace: str, *, labels: Mapping[str, str] | None = None
                   ) -> list[dict]:
        kind = _name(kind)
        await self._hook("list", kind, namespace)
        out = [copy.deepcopy(o) for (k, ns, _), o in self.objects.items() if k == kind and ns == namespace
               and all(((o["metadata"].get("labels") or {}).get(lk) == lv) for lk, lv in (labels or {}).items())]
        self.listed[kind] = self.listed.get(kind, 0) + len(out)
        return out

    async def list_everywhere(self, kind: str | Kind[Any], namespaces: list[str] | None) -> list[dict]:
        kind = _name(kind)
        out = [copy.deepcopy(o) for (k, ns, _), o in self.objects.items()
               if k == kind and (namespaces is None or ns in namespaces)]
        self.listed[kind] = self.listed.get(kind, 0) + len(out)
        return out

    async def merge_patch(self, kind: str | Kind[Any], namespace: str, name: str, patch: Mapping[str, Any]
                          ) -> dict | None:
        kind = _name(kind)
        self._check()
        obj = self.objects.get((kind, "" if kind in CLUSTER_SCOPED else namespace, name))
        if obj is None:
            return None
        self.patches.append((kind, name, copy.deepcopy(dict(patch))))
        _merge(obj, patch)
        return obj

    async def patch_status(self, kind: str | Kind[Any], namespace: str, name: str, status: Mapping[str, Any]
                           ) -> dict | None:
        kind = _name(kind)
        self._check()
        obj = self.objects.get((kind, namespace, name))
        if obj is None:
            return None
        _merge(obj.setdefault("status", {}), status)
        return obj

    async def delete(self, kind: str | Kind[Any], namespace: str, name: str) -> None:
        kind = _name(kind)
        self._check()
        await self._hook("delete", kind, namespace, name)
        self.deleted.append((kind, name))
        self.objects.pop((kind, "" if kind in CLUSTER_SCOPED else namespace, name), None)

    def events(self, reason: str | None = None) -> list[dict]:
        return [o for (k, _, _), o in self.objects.items() if k == "Event"
                and (reason is None or o["reason"] == reason)]


def resource(kind: str, name: str, spec: dict, *, created: str = "2026-11-01T00:00:00Z", status: dict | None = None,
             generation: int = 1, annotations: dict | None = None) -> dict:
    return {"apiVersion": "kelp.dev/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": generation,
                         "creationTimestamp": created, "annotations": dict(annotations or {})},
            "spec": spec, "status": status or {}}


def statefulset(name: str, replicas: int, *, ready: int | None = None, revision: str = "rev-1",
                storage: str = "10Gi", storage_class: str | None = None) -> dict:
    claim: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}
    if storage_class:
        claim["storageClassName"] = storage_class
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "ns", "generation": 1},
            "spec": {"replicas": replicas, "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {
                "app.kubernetes.io/name": "kelp", "app.kubernetes.io/instance": name,
                "app.kubernetes.io/component": "broker"}}, "spec": claim}]},
            "status": {"readyReplicas": replicas if ready is None else ready, "updatedReplicas": replicas,
                       "observedGeneration": 1, "updateRevision": revision}}


def broker_pod(cluster: str, n: int, *, revision: str = "rev-1", ready: bool = True,
               waiting: str | None = None) -> dict:
    """Broker pod n; `waiting` is its container's waiting reason (CrashLoopBackOff, ...) when given."""
    status: dict[str, Any] = {"podIP": f"10.1.0.{n + 1}",
                              "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if waiting:
        status["containerStatuses"] = [{"name": "kelp", "ready": False, "restartCount": 3,
                                        "state": {"waiting": {"reason": waiting}}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{cluster}-{n}", "namespace": "ns",
                         "labels": {"app.kubernetes.io/name": "kelp", "app.kubernetes.io/instance": cluster,
                                    "app.kubernetes.io/component": "broker", "controller-revision-hash": revision}},
            "status": status}


class FakeAdmin(BrokerAdmin):
    """A scripted broker admin API: one cluster view, described topics, and what each call did.

    It answers `request` (and so every typed call of BrokerAdmin built on it) itself; no HTTP.

    `topics` maps name -> list of partitions `{"replicas", "isr", "leader"}`; a
    reassignment marks the partition `adding`/`removing` (it then stays in
    flight until the test completes it); `fail(method, path, body)` may raise
    AdminError to script a refusal; `gate` (an asyncio.Event) holds every
    reassign call until set.
    """

    def __init__(self, *, brokers: list[int], controller: int = 0, topics: dict[str, list[dict]] | None = None,
                 min_insync: int = 2) -> None:
        self.urls = ["http://fake-broker:8080"]
        self.brokers = list(brokers)
        self.controller = controller
        self.min_insync = min_insync
        self.topics: dict[str, list[dict]] = {n: [dict(p) for p in ps] for n, ps in (topics or {}).items()}
        self.log_end: dict[tuple[str, int, int], int] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.fail: Callable[[str, str, Any], None] = lambda method, path, body: None
        self.gate: asyncio.Event | None = None
        self.unreachable = False
        self.dynamic: dict[str, str] = {}  # the cluster-wide dynamic broker configs (/admin/v1/brokers/configs)
        self.broker_dynamic: dict[int, dict[str, str]] = {}  # per-broker entities (/admin/v1/brokers/<id>/configs)
        self.topic_configs: dict[str, dict[str, str]] = {}  # topic overrides (source "topic" in describe)
        self.groups: dict[str, dict] = {}  # group id -> its describe answer (state, members, offsets)
        # Issue 20's admin contract: ACL bindings (Kafka's names) and SCRAM credentials per user and mechanism
        # (what PUT carried: iterations, salt, saltedPassword — never a password).
        self.acls: list[dict] = []
        self.scram: dict[str, dict[str, dict]] = {}
        # Issue 32: decommissioned broker ids; like the controller, nothing new is placed on them.
        self.decommissioned: set[int] = set()

    def placeable(self) -> list[int]:
        return [b for b in self.brokers if b not in self.decommissioned]

    def create_everywhere(self, name: str, partitions: int = 3) -> None:
        """A topic created by someone else (an application auto-creating it): RF 3 over the brokers that take
        new replicas, as the controller places it."""
        live = self.placeable()
        self.topics[name] = [{"replicas": [live[(i + k) % len(live)] for k in range(min(3, len(live)))],
                              "isr": [live[(i + k) % len(live)] for k in range(min(3, len(live)))]}
                             for i in range(partitions)]

    def held(self, broker: int) -> dict:
        held = [f"{n}-{i}" for n, ps in sorted(self.topics.items()) for i, p in enumerate(ps)
                if broker in p["replicas"] or broker in p.get("adding", [])]
        return {"broker_id": broker, "decommissioned": broker in self.decommissioned, "registered": True,
                "alive": broker in self.brokers, "replicas": len(held), "leaders": 0, "partitions": held[:100]}

    def describe(self, name: str) -> dict:
        parts = []
        for i, p in enumerate(self.topics[name]):
            entry = {"partition": i, "leader": p.get("leader", p["isr"][0] if p["isr"] else -1),
                     "replicas": list(p["replicas"]), "isr": list(p["isr"])}
            if p.get("adding") or p.get("removing"):
                entry["adding"], entry["removing"] = list(p.get("adding", [])), list(p.get("removing", []))
            parts.append(entry)
        return {"name": name, "internal": False, "partitions_count": len(parts),
                "replication_factor": len(parts[0]["replicas"]) if parts else 0, "partitions": parts,
                "configs": {"min.insync.replicas": {"value": str(self.min_insync), "source": "default"},
                            **{k: {"value": v, "source": "topic"}
                               for k, v in self.topic_configs.get(name, {}).items()}}}

    async def request(self, method: str, path: str, body: Any = None, *, urls: list[str] | None = None) -> Any:
        self.requests.append((method, path, copy.deepcopy(body)))
        if self.unreachable:
            raise AdminError(0, f"no broker reachable for {method} {path} (fake: unreachable)")
        self.fail(method, path, body)
        if (method, path) == ("GET", "/admin/v1/cluster"):
            return {"controller": self.controller, "brokers": [{"id": b, "rack": None} for b in self.brokers],
                    "decommissioned": sorted(self.decommissioned)}
        if path.startswith("/admin/v1/brokers/") and path.endswith("/decommission"):
            broker = int(path.split("/")[4])
            if method == "POST":
                self.decommissioned.add(broker)
            elif method == "DELETE":
                self.decommissioned.discard(broker)
            return self.held(broker)
        if (method, path) == ("GET", "/admin/v1/topics"):
            return {"topics": [{"name": n, "internal": False} for n in sorted(self.topics)]}
        if method == "GET" and path.startswith("/admin/v1/topics/"):
            name = path.rsplit("/", 1)[1]
            if name not in self.topics:
                raise AdminError(404, f"topic '{name}' does not exist")
            return self.describe(name)
        if (method, path) == ("POST", "/admin/v1/partitions/reassign"):
            if self.gate is not None:
                await self.gate.wait()
            for move in body["partitions"]:
                self._reassign(move["topic"], move["partition"], move["replicas"])
            return {"partitions": []}
        if (method, path) == ("POST", "/admin/v1/topics"):
            self.topics[body["name"]] = [{"replicas": [self.placeable()[0]], "isr": [self.placeable()[0]]}
                                         for _ in range(int(body.get("partitions") or 1))]
            return self.describe(body["name"])
        if method in ("PUT", "PATCH") and path.startswith("/admin/v1/topics/") and path.endswith("/configs"):
            name = path.split("/")[4]
            if name not in self.topics:
                raise AdminError(404, f"topic '{name}' does not exist")
            held = self.topic_configs.setdefault(name, {}) if method == "PATCH" else {}
            for key, value in body["configs"].items():
                if value is None:
                    held.pop(key, None)
                else:
                    held[key] = str(value)
            self.topic_configs[name] = held
            return {"configs": dict(held)}
        if method == "PATCH" and path.startswith("/admin/v1/brokers/") and path.split("/")[4].isdigit():
            entity = self.broker_dynamic.setdefault(int(path.split("/")[4]), {})
            for key, value in body["configs"].items():
                if value is None:
                    entity.pop(key, None)
                else:
                    entity[key] = str(value)
            return {"configs": dict(entity)}
        if method == "POST" and path.startswith("/admin/v1/topics/") and path.endswith("/partitions"):
            name = path.split("/")[4]
            while len(self.topics[name]) < int(body["partitions"]):
                self.topics[name].append({"replicas": [self.placeable()[0]], "isr": [self.placeable()[0]]})
            return self.describe(name)
        if method == "DELETE" and path.startswith("/admin/v1/topics/"):
            name = path.rsplit("/", 1)[1]
            if self.topics.pop(name, None) is None:
                raise AdminError(404, f"topic '{name}' does not exist")
            return {}
        if path.startswith("/admin/v1/groups/"):
            group = path.split("/")[4]
            if group not in self.groups:
                raise AdminError(404, f"group '{group}' does not exist", ErrorCode.GROUP_ID_NOT_FOUND)
            if method == "GET":
                return copy.deepcopy(self.groups[group])
            if method == "POST" and path.endswith("/reset-offsets"):
                if self.groups[group].get("members"):
                    raise AdminError(409, f"group '{group}' is not empty", ErrorCode.NON_EMPTY_GROUP)
                return {"partitions": []}
        if (method, path) == ("GET", "/admin/v1/partitions/reassignments"):
            return {"reassignments": self._moves()}
        if (method, path) == ("POST", "/admin/v1/partitions/elect-leaders"):
            return self._elect()
        if path.startswith("/admin/v1/acls") or path.startswith("/admin/v1/users"):
            return self._security(method, path, body)
        if path == "/admin/v1/brokers/configs" and method in ("GET", "PATCH"):
            for key, value in ((body or {}).get("configs") or {}).items() if method == "PATCH" else ():
                if value is None:
                    self.dynamic.pop(key, None)
                else:
                    self.dynamic[key] = str(value)
            return {"broker": None, "configs": dict(self.dynamic)}
        raise AssertionError(f"FakeAdmin: unexpected {method} {path}")

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)

    async def group_request(self, method: str, path: str, body: Any = None) -> Any:
        return await self.request(method, path, body)

    # -- the security endpoints of the admin contract (issue 20) ---------------------------------------------------
    ACL_FIELDS = ("resourceType", "resourceName", "patternType", "principal", "host", "operation", "permission")

    @staticmethod
    def acl_matches(acl_filter: dict, binding: dict) -> bool:
        """Exact match per given field, ANY (and MATCH for patternType, literally here) or absence match all."""
        for field in FakeAdmin.ACL_FIELDS:
            wanted = acl_filter.get(field)
            if wanted is None or wanted in ("ANY", "MATCH"):
                continue
            if binding[field] != wanted:
                return False
        return True

    def _security(self, method: str, path: str, body: Any) -> Any:
        parsed = urllib.parse.urlsplit(path)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        route = parsed.path
        if (method, route) == ("GET", "/admin/v1/acls"):
            return {"acls": [copy.deepcopy(b) for b in self.acls if self.acl_matches(query, b)]}
        if (method, route) == ("POST", "/admin/v1/acls"):
            results = []
            for binding in body["acls"]:
                assert set(binding) == set(self.ACL_FIELDS), f"not a binding of the contract: {binding}"
                if binding not in self.acls:
                    self.acls.append(copy.deepcopy(binding))
                results.append({"error": None})
            return {"results": results}
        if (method, route) == ("POST", "/admin/v1/acls/delete"):
            results = []
            for acl_filter in body["filters"]:
                deleted = [b for b in self.acls if self.acl_matches(acl_filter, b)]
                self.acls = [b for b in self.acls if b not in deleted]
                results.append({"error": None, "deleted": deleted})
            return {"results": results}
        if (method, route) == ("GET", "/admin/v1/users"):
            return {"users": [{"name": name, "credentials": [{"mechanism": m, "iterations": c["iterations"]}
                                                             for m, c in sorted(creds.items())]}
                              for name, creds in sorted(self.scram.items()) if creds]}
        if route.startswith("/admin/v1/users/") and route.endswith("/scram-credentials"):
            name = urllib.parse.unquote(route.split("/")[4])
            if method == "PUT":
                assert set(body) == {"mechanism", "iterations", "salt", "saltedPassword"}, body
                self.scram.setdefault(name, {})[body["mechanism"]] = copy.deepcopy(body)
                return {}
            if method == "DELETE":
                if query.get("mechanism") not in self.scram.get(name, {}):
                    raise AdminError(404, f"user '{name}' has no {query.get('mechanism')} credential")
                del self.scram[name][query["mechanism"]]
                return {}
        raise AssertionError(f"FakeAdmin: unexpected {method} {path}")

    def writes(self) -> list[tuple[str, str]]:
        """(method, path) of every call that would change the brokers' state."""
        return [(m, p) for m, p, _ in self.requests if m != "GET"]

    def _reassign(self, topic: str, partition: int, replicas: list[int] | None) -> None:
        p = self.topics[topic][partition]
        if replicas is None:
            if not (p.get("adding") or p.get("removing")):
                raise AdminError(400, f"{topic}-{partition} has no reassignment in progress")
            p["replicas"] = [r for r in p["replicas"] if r not in p.get("adding", [])]
            p["isr"] = [r for r in p["isr"] if r in p["replicas"]]
            p.pop("adding", None), p.pop("removing", None)
            return
        if p.get("adding") or p.get("removing"):
            raise AdminError(400, f"{topic}-{partition} is already moving; cancel it first")
        original = p["replicas"]
        if set(replicas) - set(original) & self.decommissioned:
            raise AdminError(400, f"{topic}-{partition}: broker(s) {sorted(self.decommissioned)} are decommissioned",
                             ErrorCode.INVALID_REPLICA_ASSIGNMENT)
        p["adding"] = [r for r in replicas if r not in original]
        p["removing"] = [r for r in original if r not in replicas]
        p["replicas"] = list(replicas) + p["removing"]

    def complete(self, topic: str, partition: int) -> None:
        p = self.topics[topic][partition]
        p["replicas"] = [r for r in p["replicas"] if r not in p.get("removing", [])]
        p["isr"] = list(p["replicas"])
        p.pop("adding", None), p.pop("removing", None)

    def _moves(self) -> list[dict]:
        out = []
        for name, parts in sorted(self.topics.items()):
            for i, p in enumerate(parts):
                if p.get("adding") or p.get("removing"):
                    leader = p.get("leader", p["isr"][0] if p["isr"] else -1)
                    offsets = {str(r): self.log_end.get((name, i, r), 0) for r in p["replicas"]}
                    out.append({"topic": name, "partition": i, "replicas": list(p["replicas"]),
                                "adding": list(p.get("adding", [])), "removing": list(p.get("removing", [])),
                                "isr": list(p["isr"]), "leader": leader, "log_end_offsets": offsets})
        return out

    def _elect(self) -> dict:
        results = {}
        for name, parts in self.topics.items():
            for i, p in enumerate(parts):
                preferred = p["replicas"][0]
                leader = p.get("leader", p["isr"][0] if p["isr"] else -1)
                if leader == preferred:
                    results[f"{name}-{i}"] = ErrorCode.ELECTION_NOT_NEEDED
                elif preferred in p["isr"] and preferred in self.brokers:
                    p["leader"] = preferred
                    results[f"{name}-{i}"] = ErrorCode.NONE
                else:
                    results[f"{name}-{i}"] = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        return {"results": results}

    def reassign_calls(self) -> list[Any]:
        return [body for method, path, body in self.requests
                if (method, path) == ("POST", "/admin/v1/partitions/reassign")]


def admin_of(admin: FakeAdmin):
    async def admin_for(_spec):
        return admin
    return admin_for


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def lease_holder(tmp_path, identity: str, clock: Clock, duration_s: float = 6.0):
    """An operator replica's Leadership over a real compare-and-swap Lease backend (files in tmp_path)."""
    from kelp.broker.cluster.file_leases import FileLeaseBackend
    from kelp.leases import LeaseElector
    from kelp.operator.kube.leadership import Leadership

    elector = LeaseElector(FileLeaseBackend(tmp_path), name="kelp-operator", identity=identity,
                           duration_ms=int(duration_s * 1000), monotonic=clock)
    return Leadership(elector, duration_s=duration_s, margin_s=duration_s / 3, monotonic=clock)


async def deposed(tmp_path):
    """A replica that held the Lease and believes it still does, while a stand-by has taken it over.

    Its own clock says it renewed a moment ago (CLOCK_MONOTONIC stands still while a VM is suspended), so
    `check()` passes; only a fence, a Lease write on its last resourceVersion, can tell.
    """
    mine = lease_holder(tmp_path, "operator-a", Clock())
    assert await mine.acquire_or_renew()
    their_clock = Clock()
    other = lease_holder(tmp_path, "operator-b", their_clock)
    assert not await other.acquire_or_renew()
    their_clock.t += 7
    assert await other.acquire_or_renew()
    mine.check()
    return mine
