"""Changing `spec.storage` on a running cluster: volumes expanded in place, or a clear refusal.

Why: a StatefulSet's `volumeClaimTemplates` are immutable — server-side
applying a new size answers 422 and, before this module, every
reconciliation of the Cluster failed on it. Kubernetes can grow a bound
PersistentVolumeClaim in place when its StorageClass sets
`allowVolumeExpansion: true`, which is what Strimzi does too. So:

- the StatefulSet keeps the claim template it was created with (the
  builder is given it back), so applies never touch an immutable field;
- a larger `spec.storage.size` is written into every broker's bound claim
  (`data-<cluster>-<n>`) whose StorageClass allows expansion; claims made
  later from the old template are grown the same way on later passes;
- a claim whose volume grew but whose filesystem grows only when its pod
  restarts (condition `FileSystemResizePending`, offline-resize drivers)
  gets that restart: its pod is marked `kelp.dev/manual-rolling-update`,
  so the roll restarts it under the availability rule (`restarts.py`);
  `ExpandingVolumes` never hides what else the operator waits for (a roll
  or a drain that is blocked comes first: `reconcile`);
- a smaller size (claims never shrink), another StorageClass (a claim's
  class is immutable), or a class without `allowVolumeExpansion` is refused
  with `Progressing=False`, reason `StorageChangeRefused`, naming what to
  do — never a raw API error, and nothing else stops being reconciled.

`parse_quantity` is pure; `reconcile_storage` reads and writes through the
operator's Kubernetes client.
"""

from __future__ import annotations

import re
from decimal import Decimal

from ..kube.client import PERSISTENT_VOLUME_CLAIM, POD, STORAGE_CLASS
from ..model.objects import PersistentVolumeClaim, StatefulSet
from ..model.objects_kelp import Condition
from ..model.status import condition
from ..plans.restarts import MANUAL_ROLL
from .resources import ClusterPass

__all__ = ["parse_quantity", "reconcile_storage", "claim_template"]

_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes storage quantity (`10Gi`, `500M`, `1.5Ti`) in bytes."""
    found = _QUANTITY.match(str(text).strip())
    if found is None:
        raise ValueError(f"not a storage quantity: {text!r} (examples: 10Gi, 500Mi, 1T)")
    return Decimal(found.group(1)) * _SUFFIX[found.group(2) or ""]


def claim_template(sts: StatefulSet | None) -> tuple[str | None, str | None]:
    """(size, storageClassName) of an existing StatefulSet's `data` claim template; (None, None) without one."""
    for tmpl in ((sts.get("spec") if sts else None) or {}).get("volumeClaimTemplates") or []:
        if (tmpl.get("metadata") or {}).get("name") == "data":
            spec = tmpl.get("spec") or {}
            return ((spec.get("resources") or {}).get("requests") or {}).get("storage"), spec.get("storageClassName")
    return None, None


async def reconcile_storage(ctx: ClusterPass, sts: StatefulSet | None,
                            brokers: int) -> tuple[str | None, str | None, Condition | None]:
    """(claim size, class to keep in the template, Progressing condition or None) for the claims of `brokers` pods."""
    spec = ctx.spec
    size, klass = claim_template(sts)
    if size is None:
        return None, None, None  # no StatefulSet yet: the builder uses spec.storage as it is
    if spec.storage_class is not None and spec.storage_class != klass:
        message = (f"spec.storage.storageClassName is {spec.storage_class!r} but the broker volumes were created with "
                   f"{klass or 'the default StorageClass'!r}, and a claim's StorageClass cannot change; set it back "
                   "(moving brokers to another class means new volumes: scale out onto them and drain the old)")
        await ctx.emit("StorageChangeRefused", message, warning=True)
        return size, klass, condition("Progressing", False, "StorageChangeRefused", message)
    want, have = parse_quantity(spec.storage_size), parse_quantity(size)
    if want < have:
        message = (f"spec.storage.size {spec.storage_size} is smaller than the broker volumes' {size}; "
                   f"PersistentVolumeClaims cannot shrink, set it back to at least {size}")
        await ctx.emit("StorageChangeRefused", message, warning=True)
        return size, klass, condition("Progressing", False, "StorageChangeRefused", message)
    claims: list[PersistentVolumeClaim] = []
    for n in range(brokers):
        claim = await ctx.kube.get(PERSISTENT_VOLUME_CLAIM, spec.namespace, f"data-{spec.name}-{n}")
        if claim is not None:
            claims.append(claim)
    small = [c for c in claims
             if parse_quantity(c["spec"]["resources"]["requests"]["storage"]) < want]
    if not small:
        growing = [c["metadata"]["name"] for c in claims
                   if parse_quantity(((c.get("status") or {}).get("capacity") or {}).get("storage") or "0") < want]
        if want > have and growing:
            restarting = await _restart_for_resize(ctx, claims)
            more = (f"; pod(s) {', '.join(restarting)} restart (one at a time, under the roll's availability rule) "
                    "for their filesystem to grow") if restarting else ""
            return size, klass, condition("Progressing", True, "ExpandingVolumes",
                                          f"broker volume(s) {', '.join(growing)} are growing to {spec.storage_size}"
                                          f"{more}")
        return size, klass, None
    classes = {c["spec"].get("storageClassName") for c in small}
    refused = []
    for name in sorted(c for c in classes if c):
        sc = await ctx.kube.get(STORAGE_CLASS, "", name)
        if not (sc.get("allowVolumeExpansion") if sc else None):
            refused.append(name)
    if refused or None in classes:
        which = ", ".join(repr(r) for r in refused) or "(none set)"
        message = (f"spec.storage.size {spec.storage_size} needs the broker volumes to grow from {size}, but their "
                   f"StorageClass {which} does not allow volume expansion (allowVolumeExpansion); set the size back "
                   f"to {size}, or enable expansion on the StorageClass if its driver supports it")
        await ctx.emit("StorageChangeRefused", message, warning=True)
        return size, klass, condition("Progressing", False, "StorageChangeRefused", message)
    unbound = []
    for claim in small:
        name = claim["metadata"]["name"]
        if (claim.get("status") or {}).get("phase") != "Bound":
            unbound.append(name)  # the API server refuses to resize a claim that is not bound yet
            continue
        await ctx.kube.merge_patch(PERSISTENT_VOLUME_CLAIM, spec.namespace, name,
                                   {"spec": {"resources": {"requests": {"storage": spec.storage_size}}}})
        await ctx.emit("VolumeExpanding", f"{name}: {claim['spec']['resources']['requests']['storage']} -> "
                       f"{spec.storage_size}")
    grown = len(small) - len(unbound)
    wait = f"; {', '.join(unbound)} grow once bound" if unbound else ""
    return size, klass, condition("Progressing", True, "ExpandingVolumes",
                                  f"{grown} broker volume(s) asked to grow to {spec.storage_size}{wait}")


def _resize_pending(claim: PersistentVolumeClaim) -> bool:
    return any(c.get("type") == "FileSystemResizePending" and c.get("status") == "True"
               for c in (claim.get("status") or {}).get("conditions") or [])


async def _restart_for_resize(ctx: ClusterPass, claims: list[PersistentVolumeClaim]) -> list[str]:
    """Mark the pods whose claim waits for a restart to finish its filesystem resize; the roll restarts them."""
    pods = {p["metadata"]["name"]: p for p in ctx.pods}
    out = []
    for claim in claims:
        if not _resize_pending(claim):
            continue
        name = claim["metadata"]["name"].removeprefix("data-")
        pod = pods.get(name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            continue
        out.append(name)
        meta = pod["metadata"]
        if (meta.get("annotations") or {}).get(MANUAL_ROLL) == "true":
            continue
        await ctx.kube.merge_patch(POD, ctx.spec.namespace, name, {"metadata": {"annotations": {MANUAL_ROLL: "true"}}})
        meta.setdefault("annotations", {})[MANUAL_ROLL] = "true"
        await ctx.emit("VolumeResizeRestart", f"{claim['metadata']['name']} waits for its pod to restart to finish "
                       f"its filesystem resize (FileSystemResizePending): {name} marked {MANUAL_ROLL}")
    return out
