"""The Kubernetes lease and metadata-store backends keep the same contract as the file ones, on a real API server.

Lease objects (coordination.k8s.io/v1) with resourceVersion preconditions,
MicroTime values sent exactly, and ConfigMaps sharded per topic — the same
checks as `tests/cluster/test_file_backends.py` (`tests/cluster/contract.py`).
"""

from __future__ import annotations

import pytest

from kelp.broker.cluster.kube_metadata_log import KubeMetadataLog
from kelp.kube.api import api_client_from
from kelp.kube.leases import KubeLeaseBackend
from tests.cluster import contract

pytestmark = pytest.mark.kube


@pytest.fixture
def client(kube_control_plane):
    api = api_client_from(kubeconfig=str(kube_control_plane.kubeconfig))
    yield api
    api.close()


def leases(api, ns: str) -> KubeLeaseBackend:
    return KubeLeaseBackend(api, namespace=ns, labels={"kelp.dev/cluster": "t"})


async def test_leases_create_update_and_list(client, kube_namespace) -> None:
    await contract.leases_create_update_and_list(leases(client, kube_namespace), "kelp-t")


async def test_elector_acquires_renews_and_is_fenced(client, kube_namespace) -> None:
    await contract.elector_acquires_renews_and_is_fenced_by_observed_time(leases(client, kube_namespace), "kelp-c")


async def test_racing_electors_elect_exactly_one(client, kube_namespace) -> None:
    await contract.racing_electors_elect_exactly_one(leases(client, kube_namespace), "kelp-c")


async def test_restarted_broker_takes_its_own_lease(client, kube_namespace) -> None:
    await contract.a_restarted_broker_takes_its_own_lease_at_once(leases(client, kube_namespace), "kelp-b3")


async def test_liveness_view(client, kube_namespace) -> None:
    await contract.liveness_view_follows_renewals(leases(client, kube_namespace), "kelp-x")


def metadata_log(api, ns: str, cluster: str) -> KubeMetadataLog:
    return KubeMetadataLog(api, namespace=ns, cluster=cluster)


async def test_metadata_log_appends_are_create_if_absent(client, kube_namespace) -> None:
    await contract.metadata_log_appends_are_create_if_absent(metadata_log(client, kube_namespace, "a"))


async def test_metadata_log_racing_appends_land_once(client, kube_namespace) -> None:
    await contract.metadata_log_racing_appends_land_once(metadata_log(client, kube_namespace, "r"))


async def test_metadata_log_snapshot_then_compact(client, kube_namespace) -> None:
    await contract.metadata_log_snapshot_then_compact(metadata_log(client, kube_namespace, "s"))


async def test_metadata_log_refuses_a_zombie_append_into_a_compacted_slot(client, kube_namespace) -> None:
    await contract.metadata_log_refuses_a_zombie_append_into_a_compacted_slot(metadata_log(client, kube_namespace, "z"))


async def test_metadata_log_falls_back_to_the_older_snapshot(client, kube_namespace) -> None:
    """A chunk rewritten behind the store's back no longer matches its marker's SHA-256: that snapshot is skipped."""
    from kelp.kube.api import request, request_object

    log = metadata_log(client, kube_namespace, "fb")

    async def damage(offset: int) -> None:
        name = f"/api/v1/namespaces/{kube_namespace}/configmaps/{log._chunk_name(offset, 0)}"
        obj = request_object(client, "GET", name)
        obj["data"]["doc.json"] = obj["data"]["doc.json"][:-3] + "   "
        request(client, "PUT", name, body=obj)

    await contract.metadata_log_falls_back_to_the_older_snapshot(log, damage)


async def test_metadata_log_refuses_an_append_after_a_hole(client, kube_namespace) -> None:
    from kelp.kube.api import request

    log = metadata_log(client, kube_namespace, "hole")

    async def remove(offset: int) -> None:
        request(client, "DELETE", f"/api/v1/namespaces/{kube_namespace}/configmaps/{log._entry_name(offset)}")

    await contract.metadata_log_refuses_an_append_after_a_hole(log, remove)


async def test_a_snapshot_larger_than_one_configmap_is_chunked(client, kube_namespace) -> None:
    """A snapshot of many topics spans several ConfigMaps and reads back whole (the marker is written last)."""
    log = metadata_log(client, kube_namespace, "big")
    topics = [{"name": f"t{i:05d}", "topic_id": f"{i:032x}", "configs": {"retention.ms": "1" * 200},
               "partitions": [{"replicas": [0, 1, 2], "leader": 0, "leader_epoch": 0, "isr": [0, 1, 2]}] * 4}
              for i in range(3000)]
    snap = {"offset": 0, "epoch": 1, "controller_id": 0, "next_producer_id": 0, "topics": topics, "removed": []}
    await log.write_snapshot(snap)
    loaded = await log.load()
    assert loaded.snapshot == snap


async def test_lease_times_keep_exact_microseconds(client, kube_namespace) -> None:
    """kubernetes==37's models drop a zero fraction and the server refuses it: whole seconds must still work."""
    from kelp.leases import LeaseRecord

    backend = leases(client, kube_namespace)
    made = await backend.create(LeaseRecord("kelp-round", "h", 1_700_000_000_000, 1_700_000_000_000, 1500, 0, {}))
    assert (made.acquire_time_ms, made.renew_time_ms, made.duration_ms) == (1_700_000_000_000, 1_700_000_000_000, 1500)
